package redisstore

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/internal/redisadapter"
	"github.com/protctl/protctl/pkg/runtime/internal/storecontract"
)

// Key names. Every key a script touches shares a hash tag with the others
// of the same call, so the stores run unchanged on Redis Cluster:
//
//	protctl:{S}:members                   ZSET node -> expiry (ms, server clock)
//	protctl:{S}:node:<node>               STRING JSON runtime.NodeStatus but its held partitions, PX ttl
//	protctl:{S}:held:<node>               STRING JSON {"tag", "held": []runtime.HeldPartition}, PX ttl (none: holds nothing)
//	protctl:{S|N}:lease:<p>               STRING owner:generation, PX ttl (broker.LeaseManager)
//	protctl:{S|N}:generation:<p>          STRING integer fence counter (broker.LeaseManager)
//	protctl:{S|N}:checkpoints:<sub>       HASH partition -> next offset
//	<lease key>:parked:<len>:<sub>:<agg>  STRING JSON ledger.Parked (RecordKey)
//	protctl:ledger:<sub>                  HASH aggregate -> (record key, park id)... (own slot)
//	protctl:parked:<sub>                  HASH aggregate -> record key (before 0007; own slot)
//	protctl:parked:__subscriptions__      SET subscriptions that have had entries
//	protctl:parked:<sub>:requests         Pub/Sub channel: aggregates with a new request
//	protctl:requests:<token>              HASH entry -> record key a pinned request was tried on, PX ttl
//	protctl:{<tag>}:requested:<token>:<h> STRING JSON the pinned request recorded on a record, PX ttl
//
// docs/decisions/0003-runtime-store-layout.md explains the choices,
// docs/decisions/0007-ledger-index-per-partition.md the ledger index.
const (
	prefix = "protctl:"
	// ParkedSubscriptionsKey is the SET of subscriptions that have had
	// parked entries, read by ListParked("").
	ParkedSubscriptionsKey = prefix + "parked:__subscriptions__"
)

// MembersKey is the ZSET of service's nodes, scored by the expiry of
// their last heartbeat in milliseconds since the epoch (server clock).
func MembersKey(service string) string { return prefix + "{" + service + "}:members" }

// NodeKey holds node's status record (JSON runtime.NodeStatus) with the
// heartbeat's TTL.
func NodeKey(service, node string) string { return prefix + "{" + service + "}:node:" + node }

// HeldKey holds the partitions node holds (JSON {"tag", "held"}: the tag
// of the write and a []runtime.HeldPartition) with the heartbeat's TTL,
// apart from its status record so that the record every node reads each
// heartbeat stays small (docs/decisions/0051). Missing when the node
// holds none.
func HeldKey(service, node string) string { return prefix + "{" + service + "}:held:" + node }

// ParkedEntriesKey is the ledger index of subscription: a HASH from an
// aggregate to its records, one per partition it is parked on (each with
// the id of the park that wrote it). It lives in its own slot. Readers
// find entries through it and through ParkedIndexKey.
func ParkedEntriesKey(subscription string) string { return prefix + "ledger:" + subscription }

// ParkedIndexKey is the index of the layout before decision 0007: a HASH
// aggregate -> record key, one slot per aggregate, so an aggregate parked
// on a second partition hid its first entry. Park still writes it (the
// aggregate's latest record) so that nodes and CLIs of earlier versions
// keep seeing entries, and readers merge it with ParkedEntriesKey, so
// that entries parked by earlier versions are found. It lives in its own
// slot.
func ParkedIndexKey(subscription string) string { return prefix + "parked:" + subscription }

// RequestsChannel is the Pub/Sub channel on which RequestRetry and
// RequestSkip announce the aggregate of subscription they recorded a
// request for.
func RequestsChannel(subscription string) string {
	return prefix + "parked:" + subscription + ":requests"
}

// RequestTokensKey is the HASH of the entries a pinned request with
// token was tried on (RequestPinned): the entry's name (subscription,
// partition as asked, aggregate) -> its record key, written before the
// request. It lets a repeated call find the marker of an entry that has
// since been resolved (no index names its record any more). It lives in
// its own slot and expires with the markers.
func RequestTokensKey(token string) string { return prefix + "requests:" + token }

// RequestMarkerKey is the marker that a pinned request with token was
// recorded on the record at record key rec, written in the same script as
// the request. It carries rec's hash tag, so it lives in rec's slot; a
// record key without a tag (the protean layout, which does not run on
// Cluster) gives a key without one. h is a hash of rec, so no aggregate
// name can spell another's marker.
func RequestMarkerKey(rec, token string) string {
	sum := sha256.Sum256([]byte(rec))
	h := hex.EncodeToString(sum[:16])
	if tag := redisadapter.HashTag(rec); tag != "" {
		return prefix + "{" + tag + "}:requested:" + token + ":" + h
	}
	return prefix + "requested:" + token + ":" + h
}

// RecordKey holds the parked entry of (subscription, aggregate) that is
// fenced by leaseKey. It extends the lease key, so it shares the lease's
// slot whenever the lease key carries a hash tag (both cluster layouts
// do), and the fenced scripts can check the lease and write the record
// in one step. The subscription is part of the name because a Kafka lease
// is shared by every subscription of the topic; its length is too, so
// that no (subscription, aggregate) pair can spell another's key when
// either contains ':'.
func RecordKey(leaseKey, subscription, aggregate string) string {
	return leaseKey + ":parked:" + strconv.Itoa(len(subscription)) + ":" + subscription + ":" + aggregate
}

// LeaseGroup names the keys of a set of leased partitions of one service:
// a Kafka topic's partitions are the lease group
// {Service, "topic:" + topic}. Its String form is the leaseGroup argument
// of the Checkpoints methods.
//
// Every key of a lease group carries the hash tag {Service|Name}, so a
// partition's lease and the subscriptions' checkpoints live in one slot
// and a checkpoint can be fenced by the lease in one script.
type LeaseGroup struct {
	Service string
	Name    string
}

// TopicLeaseGroup is the lease group of a Kafka topic's partitions in
// service.
func TopicLeaseGroup(service, topic string) LeaseGroup {
	return LeaseGroup{Service: service, Name: "topic:" + topic}
}

// String returns "Service|Name", the hash tag of the group's keys and the
// leaseGroup argument of Checkpoints.
func (g LeaseGroup) String() string { return g.Service + "|" + g.Name }

// ParseLeaseGroup splits "Service|Name" at its first '|'.
func ParseLeaseGroup(s string) (LeaseGroup, error) {
	service, name, ok := strings.Cut(s, "|")
	if !ok {
		return LeaseGroup{}, &broker.InvalidArgumentError{Op: "parse lease group", Arg: "lease group", Value: strconv.Quote(s), Reason: `want "service|name"`}
	}
	g := LeaseGroup{Service: service, Name: name}
	return g, g.Validate()
}

// Validate checks that the group's names are usable in key names: Service
// not empty and without '|', '{' or '}', Name not empty and without '{'
// or '}'.
func (g LeaseGroup) Validate() error {
	const op = "lease group"
	if err := storecontract.Service(op, g.Service); err != nil {
		return err
	}
	if strings.Contains(g.Service, "|") {
		return storecontract.Invalid(op, "service", strconv.Quote(g.Service), `must not contain "|" in a lease group`)
	}
	return storecontract.Tagged(op, "lease group name", g.Name)
}

func (g LeaseGroup) key(kind string) string { return prefix + "{" + g.String() + "}:" + kind }

// LeaseKey is the lease of partition p, for broker.LeaseManager.
func (g LeaseGroup) LeaseKey(p int32) string {
	lease, _ := storecontract.LeaseKeys(g.String(), p)
	return lease
}

// GenerationKey is the fence counter of partition p, for
// broker.LeaseManager.
func (g LeaseGroup) GenerationKey(p int32) string {
	_, gen := storecontract.LeaseKeys(g.String(), p)
	return gen
}

// CheckpointsKey is the HASH partition -> next offset of subscription.
func (g LeaseGroup) CheckpointsKey(subscription string) string {
	return checkpointsKey(g.String(), subscription)
}

func checkpointsKey(leaseGroup, subscription string) string {
	return prefix + "{" + leaseGroup + "}:checkpoints:" + subscription
}
