package broker

import (
	"fmt"
	"strconv"
	"strings"
)

// DefaultBackfillSuffix names the low-priority lane of a partition:
// C:K:backfill in the Protean layout.
const DefaultBackfillSuffix = "backfill"

// DLQSuffix names a partition's dead-letter stream, C:K:dlq.
const DLQSuffix = "dlq"

// MaxKeyLen is the longest partition key accepted, in bytes.
const MaxKeyLen = 255

// Layout maps categories, partition keys and groups to Redis key names.
//
// The zero value is the Protean layout, which a Protean deployment writes
// and protctl reads unchanged:
//
//	C:__partitions__     SET, the index of category C
//	C:__groups__         SET, the groups expected to read category C
//	C:K                  STREAM, partition K's main lane
//	C:K:<backfill>       STREAM, partition K's low-priority lane
//	C:K:dlq              STREAM, partition K's dead letters
//	C:dlq                STREAM, the category's dead letters (Protean's)
//	G:K:__lease__        STRING owner:generation with a PX TTL
//	G:K:__generation__   STRING integer, the fence counter (never deleted)
//
// The cluster layout puts K in a hash tag ({K}) so that every key a script
// touches for one partition lives in one Redis Cluster slot. Layouts are
// values: compare them with ==.
type Layout struct {
	cluster bool
}

// Layouts.
var (
	ProteanLayout = Layout{}
	ClusterLayout = Layout{cluster: true}
)

// ParseLayout turns "protean" or "cluster" into a Layout.
func ParseLayout(name string) (Layout, error) {
	switch name {
	case "", "protean":
		return ProteanLayout, nil
	case "cluster":
		return ClusterLayout, nil
	}
	return Layout{}, invalid("layout", "layout", strconv.Quote(name), `want "protean" or "cluster"`)
}

// String returns "protean" or "cluster".
func (l Layout) String() string {
	if l.cluster {
		return "cluster"
	}
	return "protean"
}

// IsCluster reports whether keys carry hash tags.
func (l Layout) IsCluster() bool { return l.cluster }

func (l Layout) part(key string) string {
	if l.cluster {
		return "{" + key + "}"
	}
	return key
}

// IndexKey is the SET of partition keys of category.
func (l Layout) IndexKey(category string) string { return category + ":__partitions__" }

// GroupsKey is the SET of groups registered to read category. Reap refuses
// while a registered group has not read a partition's entries, even before
// the group has created itself on the stream.
func (l Layout) GroupsKey(category string) string { return category + ":__groups__" }

// Stream is partition key's main lane.
func (l Layout) Stream(category, key string) string { return category + ":" + l.part(key) }

// LaneStream is partition key's lane with the given suffix (e.g. the
// backfill lane). An empty suffix is the main lane.
func (l Layout) LaneStream(category, key, suffix string) string {
	if suffix == "" {
		return l.Stream(category, key)
	}
	return l.Stream(category, key) + ":" + suffix
}

// DLQStream is partition key's dead-letter stream.
func (l Layout) DLQStream(category, key string) string {
	return l.LaneStream(category, key, DLQSuffix)
}

// LeaseKey holds group's lease on partition key.
func (l Layout) LeaseKey(group, key string) string { return group + ":" + l.part(key) + ":__lease__" }

// GenerationKey holds group's fence counter for partition key.
func (l Layout) GenerationKey(group, key string) string {
	return group + ":" + l.part(key) + ":__generation__"
}

// ValidateKey checks a partition key the way Protean does on publish: not
// empty, at most MaxKeyLen bytes, no ':', not a reserved name
// (ReservedKey). The cluster layout also refuses '{' and '}', which would
// change the hash tag.
func (l Layout) ValidateKey(key, backfillSuffix string) error {
	const op = "validate key"
	q := strconv.Quote(key)
	switch {
	case key == "":
		return invalid(op, "partition key", q, "must not be empty")
	case len(key) > MaxKeyLen:
		return invalid(op, "partition key", truncate(q, 40), fmt.Sprintf("is %d bytes, at most %d allowed", len(key), MaxKeyLen))
	case strings.Contains(key, ":"):
		return invalid(op, "partition key", q, `must not contain ":"`)
	case reservedReason(key, backfillSuffix) != "":
		return invalid(op, "partition key", q, reservedReason(key, backfillSuffix))
	case l.cluster && strings.ContainsAny(key, "{}"):
		return invalid(op, "partition key", q, `must not contain "{" or "}" in the cluster layout`)
	}
	return nil
}

// ReservedKey reports whether key is a name the layout keeps for a
// category's own keys, which no partition may have: "dlq" (C:dlq is the
// category's dead-letter stream, as C:K:dlq is K's), the backfill suffix
// (backfillSuffix, or DefaultBackfillSuffix when it is ""; C:<backfill>
// and C:<backfill>:dlq are the category's own), and the form __x__
// (C:__partitions__, C:__groups__, C:__wake__). A key found by scanning
// the keyspace for C:* that is reserved is no partition of C: readers
// leave such streams out of partition findings. ValidateKey refuses
// these keys.
func ReservedKey(key, backfillSuffix string) bool {
	return reservedReason(key, backfillSuffix) != ""
}

// reservedReason says why key is reserved, "" when it is not.
func reservedReason(key, backfillSuffix string) string {
	switch {
	case key == DLQSuffix:
		return `"dlq" is reserved for dead-letter streams`
	case key == backfillSuffix || (backfillSuffix == "" && key == DefaultBackfillSuffix):
		return "is the backfill lane's suffix"
	case len(key) >= 4 && strings.HasPrefix(key, "__") && strings.HasSuffix(key, "__"):
		return "the form __x__ is reserved"
	}
	return ""
}

// ValidateName checks a category or group name: not empty, and in the
// cluster layout without '{' or '}'.
func (l Layout) ValidateName(op, what, name string) error {
	if name == "" {
		return invalid(op, what, `""`, "must not be empty")
	}
	if l.cluster && strings.ContainsAny(name, "{}") {
		return invalid(op, what, strconv.Quote(name), `must not contain "{" or "}" in the cluster layout`)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// FenceToken is the lease value and the consumer name of one generation of
// an owner: "owner:generation".
func FenceToken(owner string, generation int64) string {
	return owner + ":" + strconv.FormatInt(generation, 10)
}

// ParseFenceToken splits "owner:generation" at its last ':'. Owners may
// contain ':' themselves.
func ParseFenceToken(token string) (owner string, generation int64, err error) {
	i := strings.LastIndexByte(token, ':')
	if i <= 0 {
		return "", 0, invalid("parse fence token", "token", strconv.Quote(token), `want "owner:generation"`)
	}
	g, err := strconv.ParseInt(token[i+1:], 10, 64)
	if err != nil || g <= 0 {
		return "", 0, invalid("parse fence token", "token", strconv.Quote(token), "generation is not a positive integer")
	}
	return token[:i], g, nil
}

// WakeChannel is the Pub/Sub channel on which a publish through
// PublishPartitioned announces the key it appended to, so that consumers
// of idle partitions wait instead of polling.
func (l Layout) WakeChannel(category string) string { return category + ":__wake__" }
