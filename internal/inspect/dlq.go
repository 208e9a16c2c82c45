package inspect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// DeadLetterQuery selects dead letters of one category. The zero value
// of each filter keeps everything.
type DeadLetterQuery struct {
	Category string
	// Key is a glob (path.Match syntax: *, ?, [...], \) over partition
	// keys: only those partitions' dead-letter streams are read, and
	// the category's own (C:dlq) is left out. "" reads every one.
	Key string
	// Reason keeps the dead letters whose reason it matches.
	Reason *regexp.Regexp
	// Group keeps one consumer group's dead letters.
	Group string
	// OlderThan and NewerThan keep the dead letters dead-lettered at
	// least (at most) that long ago, by the server's clock and the time
	// in the dead letter's id.
	OlderThan, NewerThan time.Duration
	// IDs keeps only these dead-letter ids.
	IDs []string
	// Limit stops after that many (in listing order); 0 is no limit.
	Limit int
	// Scan paces the keyspace scan that finds the dead-letter streams.
	Scan ScanOptions
}

// DeadLetter is one entry of a dead-letter stream.
type DeadLetter struct {
	broker.DeadLetter
	Category string
	// Key is the partition whose C:K:dlq holds it; "" for the category's
	// own dead-letter streams (Protean's C:dlq and C:<backfill>:dlq).
	Key string
	// Stream is the dead-letter stream, ID the entry's id.
	Stream, ID string
	// DeadLetteredAt is the time in the id (the server's clock when it
	// was appended); Age is the server's time since.
	DeadLetteredAt time.Time
	Age            time.Duration
	// Fields are the entry's field names and values as the server
	// returned them; Digest is their redisbroker.EntryDigest, what a
	// replay or purge of the entry is fenced on.
	Fields []string
	Digest string
}

// ErrAmbiguous is returned (wrapped) by DeadLetterByID when the id is in
// several dead-letter streams of the category.
var ErrAmbiguous = errors.New("inspect: ambiguous")

// dlqStream is a dead-letter stream of a category.
type dlqStream struct {
	name string
	key  string // "" for the category's own
}

// dlqPage is how many entries one XRANGE of a dead-letter stream reads.
const dlqPage = 500

// DeadLetters lists the dead letters q selects, the category's own
// dead-letter streams first, then each partition's by key, each oldest
// first. The streams are found by a paced SCAN for C:*dlq (as fsck finds
// partition streams), so the dead letters of a partition no longer in
// the index are found too. An unknown category is an error wrapping
// ErrNotFound; a key named like a dead-letter stream that is not one
// fails the listing with a *broker.WrongTypeError, after the others were
// read (the rows are returned with it).
func (in *Inspector) DeadLetters(ctx context.Context, q DeadLetterQuery) ([]DeadLetter, error) {
	streams, wrong, now, err := in.dlqStreams(ctx, q.Category, q.Key, q.Scan)
	if err != nil {
		return nil, in.typed(ctx, err)
	}
	var out []DeadLetter
	groupSeen := false // a dead letter read names q.Group
	for _, s := range streams {
		err := in.readDLQ(ctx, q.Category, s, now, func(d DeadLetter) bool {
			groupSeen = groupSeen || (q.Group != "" && d.ConsumerGroup == q.Group)
			if q.keep(d) {
				out = append(out, d)
			}
			return q.Limit <= 0 || len(out) < q.Limit
		})
		var wte *broker.WrongTypeError
		switch {
		case errors.As(err, &wte):
			if wrong == nil {
				wrong = err
			}
		case err != nil:
			return nil, in.typed(ctx, err)
		}
		if q.Limit > 0 && len(out) >= q.Limit {
			break
		}
	}
	if q.Group != "" && !groupSeen && wrong == nil {
		if err := in.requireDLQGroup(ctx, q.Category, q.Group); err != nil {
			return nil, in.typed(ctx, err)
		}
	}
	return out, in.typed(ctx, wrong)
}

// requireDLQGroup fails with an error wrapping ErrNotFound unless group,
// which no dead letter of category names, is a group anyway: a lease or
// generation key or a group registry names it (GroupKnown), or it reads
// the category's own stream (an unpartitioned subscription, which has
// none of those) or a lane of one of its partitions. A --group filter that selects nothing is then a group
// with no dead letters, not a typo that would plan nothing and exit 0.
func (in *Inspector) requireDLQGroup(ctx context.Context, category, group string) error {
	known, err := in.GroupKnown(ctx, group)
	if err != nil || known {
		return err
	}
	groups, err := in.client.XInfoGroups(ctx, category).Result()
	if err != nil && !isNoSuchKey(err) && !strings.HasPrefix(err.Error(), "WRONGTYPE") {
		return wrapErr("find group", category, "stream", err)
	}
	for _, g := range groups {
		if g.Name == group {
			return nil
		}
	}
	// Created on a partition's lane, never leased.
	if reads, err := in.GroupReadsPartitions(ctx, category, group); err != nil || reads {
		return err
	}
	// A dead letter outside the selection (a --key filter reads only the
	// matching partitions' streams) may name it: read them all.
	if seen, err := in.dlqGroupSeen(ctx, category, group); err != nil || seen {
		return err
	}
	return fmt.Errorf("%w: --group %q not found: no dead letter of %q names it, no lease or generation key %s and no group registry lists it, and it reads neither %s nor its partitions (check the spelling)",
		ErrNotFound, group, category, in.layout.LeaseKey(group, "*"), category)
}

// GroupReadsPartitions reports whether group is created on a lane of a
// partition of category, or registered for it. It walks the category's
// partitions, stopping at the first that has the group.
func (in *Inspector) GroupReadsPartitions(ctx context.Context, category, group string) (bool, error) {
	errSeen := errors.New("seen")
	err := in.EachPartition(ctx, category, PartitionOptions{Group: group}, func(p Partition) error {
		if g, ok := p.Group(group); ok && (g.Created || g.Registered) {
			return errSeen
		}
		return nil
	})
	if errors.Is(err, errSeen) {
		return true, nil
	}
	return false, err
}

// dlqGroupSeen reports whether a dead letter of any of category's
// dead-letter streams records group as its consumer group.
func (in *Inspector) dlqGroupSeen(ctx context.Context, category, group string) (bool, error) {
	streams, _, now, err := in.dlqStreams(ctx, category, "", ScanOptions{})
	if err != nil {
		return false, err
	}
	seen := false
	for _, s := range streams {
		err := in.readDLQ(ctx, category, s, now, func(d DeadLetter) bool {
			seen = d.ConsumerGroup == group
			return !seen
		})
		var wte *broker.WrongTypeError
		if err != nil && !errors.As(err, &wte) {
			return false, err
		}
		if seen {
			return true, nil
		}
	}
	return false, nil
}

func (q DeadLetterQuery) keep(d DeadLetter) bool {
	switch {
	case q.Reason != nil && !q.Reason.MatchString(d.FailureReason),
		q.Group != "" && d.ConsumerGroup != q.Group,
		q.OlderThan > 0 && d.Age < q.OlderThan,
		q.NewerThan > 0 && d.Age >= q.NewerThan,
		len(q.IDs) > 0 && !slices.Contains(q.IDs, d.ID):
		return false
	}
	return true
}

// DeadLetterByID reads dead letter id of category, from the partition
// keys keyGlob matches ("" for every dead-letter stream of the category).
// None: an error wrapping ErrNotFound; the id in several streams (ids are
// unique per stream only): an error wrapping ErrAmbiguous naming them.
func (in *Inspector) DeadLetterByID(ctx context.Context, category, keyGlob, id string, scan ScanOptions) (DeadLetter, error) {
	if _, err := broker.ParseStreamID(id); err != nil {
		return DeadLetter{}, &broker.InvalidArgumentError{Op: "show dead letter", Arg: "id", Value: fmt.Sprintf("%q", id), Reason: `want "<ms>-<seq>"`}
	}
	streams, wrong, now, err := in.dlqStreams(ctx, category, keyGlob, scan)
	if err != nil {
		return DeadLetter{}, in.typed(ctx, err)
	}
	var found []DeadLetter
	for _, s := range streams {
		msgs, err := in.xrange(ctx, s.name, id, id, 1)
		if err != nil {
			return DeadLetter{}, in.typed(ctx, err)
		}
		for _, m := range msgs {
			found = append(found, deadLetterOf(category, s, m, now))
		}
	}
	switch len(found) {
	case 0:
		if wrong != nil {
			return DeadLetter{}, in.typed(ctx, wrong)
		}
		where := "any dead-letter stream of " + category
		if keyGlob != "" {
			where = fmt.Sprintf("the dead-letter streams of %s's partitions matching %q", category, keyGlob)
		}
		return DeadLetter{}, fmt.Errorf("%w: no dead letter %s in %s", ErrNotFound, id, where)
	case 1:
		return found[0], nil
	}
	names := make([]string, len(found))
	for i, d := range found {
		names[i] = d.Stream
	}
	return DeadLetter{}, fmt.Errorf("%w: dead letter %s is in %s: name the partition with --key", ErrAmbiguous, id, strings.Join(names, " and "))
}

// ReadDeadLetter reads entry id of the dead-letter stream stream as it is
// now (found false when it is gone).
func (in *Inspector) ReadDeadLetter(ctx context.Context, category, key, stream, id string) (d DeadLetter, found bool, err error) {
	msgs, err := in.xrange(ctx, stream, id, id, 1)
	if err != nil || len(msgs) == 0 {
		return DeadLetter{}, false, in.typed(ctx, err)
	}
	now, err := in.serverTime(ctx)
	if err != nil {
		return DeadLetter{}, false, err
	}
	return deadLetterOf(category, dlqStream{name: stream, key: key}, msgs[0], now), true, nil
}

// dlqStreams finds category's dead-letter streams whose partition key
// keyGlob matches (all, the category's own included, for ""), sorted,
// with the server's time. A key named like one that holds another type
// is left out, and wrong is the *broker.WrongTypeError of the first.
func (in *Inspector) dlqStreams(ctx context.Context, category, keyGlob string, scan ScanOptions) (streams []dlqStream, wrong error, now time.Time, err error) {
	const op = "list dead letters"
	if err := in.layout.ValidateName(op, "category", category); err != nil {
		return nil, nil, time.Time{}, err
	}
	if _, err := path.Match(keyGlob, ""); err != nil {
		return nil, nil, time.Time{}, &broker.InvalidArgumentError{Op: op, Arg: "key pattern", Value: fmt.Sprintf("%q", keyGlob), Reason: "is not a valid glob (*, ?, [...], \\)"}
	}
	known, err := in.categoryKnown(ctx, category)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	if !known {
		return nil, nil, time.Time{}, fmt.Errorf("%w: category %q: no index, group registry or key named %s:* in Redis", ErrNotFound, category, category)
	}
	seen := map[string]bool{}
	var found []dlqStream
	err = in.scanKeys(ctx, escapeGlob(category+":")+"*"+broker.DLQSuffix, "", scan, func(name string) bool {
		s, ok := in.dlqOf(category, name)
		if !ok || seen[name] {
			return false
		}
		seen[name] = true
		if keyGlob != "" {
			if s.key == "" {
				return false
			}
			if m, _ := path.Match(keyGlob, s.key); !m {
				return false
			}
		}
		found = append(found, s)
		return true
	})
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	slices.SortFunc(found, func(a, b dlqStream) int { return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.name, b.name)) })
	if len(found) > 0 {
		p := in.client.Pipeline()
		types := make([]*redis.StatusCmd, len(found))
		for i, s := range found {
			types[i] = p.Type(ctx, s.name)
		}
		if _, err := p.Exec(ctx); pipeErr(op, err) != nil {
			return nil, nil, time.Time{}, pipeErr(op, err)
		}
		for i, s := range found {
			switch t := types[i].Val(); t {
			case "stream":
				streams = append(streams, s)
			case "none", "":
			default:
				if wrong == nil {
					wrong = &broker.WrongTypeError{Op: op, Key: s.name, Want: "stream", Got: t}
				}
			}
		}
	}
	now, err = in.serverTime(ctx)
	return streams, wrong, now, err
}

// dlqOf reads a key name as a dead-letter stream of category: C:dlq and
// C:<backfill>:dlq are the category's own (Protean's), C:K:dlq (C:{K}:dlq
// in the cluster layout) partition K's. Anything else (a longer category
// name sharing the prefix) is not.
func (in *Inspector) dlqOf(category, name string) (dlqStream, bool) {
	rest, ok := strings.CutPrefix(name, category+":")
	if !ok {
		return dlqStream{}, false
	}
	if rest == broker.DLQSuffix || rest == in.cfg.backfill+":"+broker.DLQSuffix {
		return dlqStream{name: name}, true
	}
	key, ok := strings.CutSuffix(rest, ":"+broker.DLQSuffix)
	if !ok {
		return dlqStream{}, false
	}
	if in.layout.IsCluster() {
		if len(key) < 3 || key[0] != '{' || key[len(key)-1] != '}' {
			return dlqStream{}, false
		}
		key = key[1 : len(key)-1]
	}
	if in.layout.ValidateKey(key, in.cfg.backfill) != nil {
		return dlqStream{}, false
	}
	return dlqStream{name: name, key: key}, true
}

// readDLQ reads s page by page, oldest first, calling fn for each entry
// until it returns false.
func (in *Inspector) readDLQ(ctx context.Context, category string, s dlqStream, now time.Time, fn func(DeadLetter) bool) error {
	start := "-"
	for {
		msgs, err := in.xrange(ctx, s.name, start, "+", dlqPage)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if !fn(deadLetterOf(category, s, m, now)) {
				return nil
			}
		}
		if len(msgs) < dlqPage {
			return nil
		}
		start = "(" + msgs[len(msgs)-1].id
	}
}

// rawEntry is an entry as XRANGE returns it: the fields in the server's
// order (go-redis's XMessage holds them in a map, which loses the order
// the digest needs).
type rawEntry struct {
	id     string
	fields []string
}

func (in *Inspector) xrange(ctx context.Context, stream, start, end string, count int) ([]rawEntry, error) {
	const op = "read dead letters"
	v, err := in.client.Do(ctx, "XRANGE", stream, start, end, "COUNT", count).Slice()
	if err != nil {
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		return nil, wrapErr(op, stream, "stream", err)
	}
	out := make([]rawEntry, 0, len(v))
	for _, e := range v {
		pair, ok := e.([]any)
		if !ok || len(pair) != 2 {
			return nil, fmt.Errorf("inspect: %s %s: unexpected reply %v", op, stream, e)
		}
		id, _ := pair[0].(string)
		flat, _ := pair[1].([]any)
		r := rawEntry{id: id, fields: make([]string, len(flat))}
		for i, f := range flat {
			r.fields[i], _ = f.(string)
		}
		out = append(out, r)
	}
	return out, nil
}

func deadLetterOf(category string, s dlqStream, m rawEntry, now time.Time) DeadLetter {
	fields := make(map[string]string, len(m.fields)/2)
	for i := 0; i+1 < len(m.fields); i += 2 {
		if _, dup := fields[m.fields[i]]; !dup {
			fields[m.fields[i]] = m.fields[i+1]
		}
	}
	d := DeadLetter{
		DeadLetter: broker.ParseDeadLetter(fields),
		Category:   category, Key: s.key, Stream: s.name, ID: m.id,
		Fields: m.fields, Digest: redisbroker.EntryDigest(m.fields),
	}
	if ms, ok := idMillis(m.id); ok {
		d.DeadLetteredAt = time.UnixMilli(ms).UTC()
		d.Age = max(now.Sub(d.DeadLetteredAt), 0)
	}
	return d
}
