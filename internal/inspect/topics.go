package inspect

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/pause"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// Offsets is the Kafka side of a topic snapshot: each partition's
// earliest retained offset and head. *kafkasource.Source implements it.
type Offsets interface {
	// Watermarks returns the bounds of every partition of topic when no
	// partitions are given. It fails with an error wrapping
	// kafkasource.ErrTopicNotFound when the topic does not exist and
	// kafkasource.ErrUnreachable when no broker answers. It blocks until
	// the brokers answer, ctx ends or its own retry budget runs out, and
	// must be safe for concurrent use.
	Watermarks(ctx context.Context, topic string, partitions ...int32) (map[int32]kafkasource.Watermarks, error)
}

var _ Offsets = (*kafkasource.Source)(nil)

// Pinger is an optional capability of Offsets: Ping answers nil when a
// broker answers and wraps kafkasource.ErrUnreachable when none does, so
// that a listing that reads no topic still tells an empty answer from
// brokers it could not reach. *kafkasource.Source implements it.
type Pinger interface {
	Ping(ctx context.Context) error
}

var _ Pinger = (*kafkasource.Source)(nil)

// Topic is one Kafka topic's lease group in a service (`topics show`; a
// row group of `topics ls`): every partition with its lease and each
// subscription's checkpoint and lag.
type Topic struct {
	Service string `json:"service"`
	Topic   string `json:"topic"`
	// LeaseGroup is "S|topic:T" (redisstore.LeaseGroup.String).
	LeaseGroup string `json:"leaseGroup"`
	// Subscriptions are the names whose checkpoints are shown, sorted.
	Subscriptions []string         `json:"subscriptions"`
	Partitions    []TopicPartition `json:"partitions"`
	// Pauses are the operators' pause entries of the shown subscriptions
	// (`protctl pause SUB ... --service S --topic T`), by subscription,
	// then selector. An aggregate's partition is not known here (it may
	// come from a header), so the entries are the topic's, not a
	// partition's; a whole-subscription pause also marks every
	// partition's TopicSubscription.Paused.
	Pauses []TopicPause `json:"pauses"`
	// Error is set for a topic found in Redis that Kafka does not know
	// (only when topics were discovered by Topics rather than named);
	// Partitions is empty then.
	Error string `json:"error,omitempty"`
}

// TopicPartition is one partition of a topic's lease group.
type TopicPartition struct {
	Partition int32 `json:"partition"`
	// Owner, TTLMs and Token come from the lease; null unless held.
	Owner *string `json:"owner"`
	// Generation is the held lease's generation, else the generation
	// counter; null when never leased.
	Generation *int64     `json:"generation"`
	TTLMs      *int64     `json:"ttlMs"`
	State      LeaseState `json:"state"`
	Token      *string    `json:"token"`
	// EarliestOffset and HeadOffset are Kafka's low and high watermarks
	// (the partition holds [earliest, head)), as decimal strings.
	EarliestOffset string              `json:"earliestOffset"`
	HeadOffset     string              `json:"headOffset"`
	Subscriptions  []TopicSubscription `json:"subscriptions"`
	// Earliest and Head are the watermarks as numbers, for tables.
	Earliest int64 `json:"-"`
	Head     int64 `json:"-"`
}

// TopicSubscription is a subscription's position on a partition.
type TopicSubscription struct {
	Name string `json:"name"`
	// Checkpoint is the next offset the subscription reads, as a decimal
	// string; null when it never saved one for the partition.
	Checkpoint *string `json:"checkpoint"`
	// Lag is head - checkpoint (0 when the checkpoint is at or past the
	// head); null without a checkpoint.
	Lag *int64 `json:"lag"`
	// Next is Checkpoint as a number (-1 when null), for tables.
	Next int64 `json:"-"`
	// Health is the subscription's status on the partition; filled only
	// with TopicOptions.Health.
	Health *Health `json:"health,omitempty"`
	// Paused is true while the whole subscription is paused by an
	// operator (selector "all"): none of its records is handled.
	Paused bool `json:"paused"`
	// PausedKeys counts the subscription's key and glob pause entries
	// (its aggregates held back wherever they are), for tables.
	PausedKeys int `json:"-"`
}

// TopicPause is one operator's pause entry of a topic subscription.
type TopicPause struct {
	Subscription string `json:"subscription"`
	pause.Entry
}

// TopicOptions tunes Topics and Topic. The zero value discovers the
// subscriptions by a paced scan.
type TopicOptions struct {
	// Subscriptions, when set, are the subscriptions shown (no scan is
	// made for them).
	Subscriptions []string
	// Scan paces the keyspace scan that finds subscriptions (and, for
	// Topics without topics, the topics).
	Scan ScanOptions
	// Health fills TopicSubscription.Health: the status, lag in records
	// and, when kafka also implements RecordTimes, in seconds (one
	// single-record fetch per subscription behind on a partition).
	Health     bool
	Thresholds Thresholds
}

// Topics reads the lease groups of service's Kafka topics: the heads
// from kafka, and in one pipelined round trip per topic the leases,
// generation counters and checkpoints from Redis. Without topics, the
// topics are those with keys in Redis (found by a paced SCAN of
// protctl:{S|topic:*}:*), sorted; a topic found there that Kafka does not
// know is listed with Error set. A named topic Kafka does not know fails
// with an error wrapping ErrNotFound and kafkasource.ErrTopicNotFound.
// Unreachable brokers wrap broker.ErrUnavailable.
//
// Subscriptions are opts.Subscriptions, or those with a checkpoints hash
// (protctl:{S|topic:T}:checkpoints:*) found by the same scan.
func (in *Inspector) Topics(ctx context.Context, kafka Offsets, service string, topics []string, opts TopicOptions) ([]Topic, error) {
	if kafka == nil {
		return nil, fmt.Errorf("inspect: read topics: %w: no Kafka reader", broker.ErrInvalidArgument)
	}
	// Validate the service even when no topic is named.
	for _, t := range append([]string{"x"}, topics...) {
		if err := redisstore.TopicLeaseGroup(service, t).Validate(); err != nil {
			return nil, err
		}
	}
	discovered := len(topics) == 0
	var subs map[string][]string
	if len(opts.Subscriptions) == 0 || discovered {
		found, err := in.scanTopicKeys(ctx, service, topics, opts.Scan)
		if err != nil {
			return nil, err
		}
		subs = found
		if discovered {
			for t := range found {
				topics = append(topics, t)
			}
			slices.Sort(topics)
		}
	}
	if len(topics) == 0 {
		// Nothing in Redis names a topic of service, so Kafka would not
		// be asked anything: ask it whether it answers, or an unreachable
		// Kafka would read as a service without topics.
		if p, ok := kafka.(Pinger); ok {
			if err := p.Ping(ctx); err != nil {
				return nil, kafkaErr("read topics", err)
			}
		}
	}
	out := make([]Topic, 0, len(topics))
	for _, t := range topics {
		names := opts.Subscriptions
		if len(names) == 0 {
			names = subs[t]
		}
		tp, err := in.readTopic(ctx, kafka, service, t, names)
		if err == nil && opts.Health {
			err = in.topicHealth(ctx, kafka, &tp, opts.Thresholds)
		}
		if err != nil {
			if discovered && errors.Is(err, ErrNotFound) {
				tp.Error = "topic not found in Kafka"
				out = append(out, tp)
				continue
			}
			return nil, err
		}
		out = append(out, tp)
	}
	return out, nil
}

// Topic is Topics for one named topic.
func (in *Inspector) Topic(ctx context.Context, kafka Offsets, service, topic string, opts TopicOptions) (Topic, error) {
	ts, err := in.Topics(ctx, kafka, service, []string{topic}, opts)
	if err != nil {
		return Topic{}, err
	}
	return ts[0], nil
}

// scanTopicKeys finds, by one paced SCAN, the topics of service with keys
// in Redis and the subscriptions with checkpoints on each. With exactly
// one topic the scan matches only that topic's checkpoints.
func (in *Inspector) scanTopicKeys(ctx context.Context, service string, topics []string, opts ScanOptions) (map[string][]string, error) {
	prefix := strings.TrimSuffix(redisstore.TopicLeaseGroup(service, "").LeaseKey(0), "}:lease:0")
	// prefix is "protctl:{S|topic:"
	match := escapeGlob(prefix) + "*}:*"
	if len(topics) == 1 {
		match = escapeGlob(redisstore.TopicLeaseGroup(service, topics[0]).CheckpointsKey("")) + "*"
	}
	want := map[string]bool{}
	for _, t := range topics {
		want[t] = true
	}
	found := map[string]map[string]bool{}
	err := in.scanKeys(ctx, match, "", opts, func(key string) bool {
		rest, ok := strings.CutPrefix(key, prefix)
		if !ok {
			return false
		}
		topic, kind, ok := strings.Cut(rest, "}:")
		if !ok || (len(want) > 0 && !want[topic]) {
			return false
		}
		if found[topic] == nil {
			found[topic] = map[string]bool{}
		}
		if sub, ok := strings.CutPrefix(kind, "checkpoints:"); ok && sub != "" {
			found[topic][sub] = true
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string][]string, len(found))
	for t, subs := range found {
		names := make([]string, 0, len(subs))
		for s := range subs {
			names = append(names, s)
		}
		slices.Sort(names)
		out[t] = names
	}
	return out, nil
}

// readTopic reads one topic: Kafka first (it says which partitions
// exist), then one pipeline with every partition's lease, PTTL and
// generation and every subscription's checkpoints (all in the lease
// group's slot).
func (in *Inspector) readTopic(ctx context.Context, kafka Offsets, service, topic string, subs []string) (Topic, error) {
	const op = "read topic"
	g := redisstore.TopicLeaseGroup(service, topic)
	subs = slices.Clone(subs)
	slices.Sort(subs)
	subs = slices.Compact(subs)
	t := Topic{Service: service, Topic: topic, LeaseGroup: g.String(), Subscriptions: subs, Partitions: []TopicPartition{}, Pauses: []TopicPause{}}
	if t.Subscriptions == nil {
		t.Subscriptions = []string{}
	}
	marks, err := kafka.Watermarks(ctx, topic)
	switch {
	case errors.Is(err, kafkasource.ErrTopicNotFound):
		return t, fmt.Errorf("inspect: %s %q: %w: %w", op, topic, ErrNotFound, err)
	case err != nil:
		return t, kafkaErr(fmt.Sprintf("%s %q", op, topic), err)
	}
	parts := make([]int32, 0, len(marks))
	for p := range marks {
		parts = append(parts, p)
	}
	slices.Sort(parts)

	type cmds struct {
		lease, gen *redis.StringCmd
		pttl       *redis.DurationCmd
	}
	pipe := in.client.Pipeline()
	cs := make([]cmds, len(parts))
	for i, p := range parts {
		lk := g.LeaseKey(p)
		cs[i] = cmds{lease: pipe.Get(ctx, lk), pttl: pipe.PTTL(ctx, lk), gen: pipe.Get(ctx, g.GenerationKey(p))}
	}
	cps := make([]*redis.MapStringStringCmd, len(subs))
	for i, s := range subs {
		cps[i] = pipe.HGetAll(ctx, g.CheckpointsKey(s))
	}
	if len(parts)+len(subs) > 0 {
		if _, err := pipe.Exec(ctx); pipeErr(op, err) != nil {
			return t, pipeErr(op, err)
		}
	}
	pauses := make([]pause.Set, len(subs))
	store := redisstore.New(in.client)
	for i, s := range subs {
		if pauses[i], err = store.ReadPauses(ctx, g.String(), s); err != nil {
			return t, err
		}
		for _, p := range pauses[i] {
			t.Pauses = append(t.Pauses, TopicPause{Subscription: s, Entry: p})
		}
	}
	checkpoints := make([]map[string]string, len(subs))
	for i, c := range cps {
		m, err := c.Result()
		if err != nil {
			return t, wrapErr(op, g.CheckpointsKey(subs[i]), "hash", err)
		}
		checkpoints[i] = m
	}
	for i, p := range parts {
		r := leaseRead{}
		if d, err := cs[i].pttl.Result(); err == nil {
			r.pttl, r.pttlOK = ttlMs(d), true
		}
		for _, c := range []struct {
			cmd *redis.StringCmd
			key string
			dst *any
		}{{cs[i].lease, g.LeaseKey(p), &r.lease}, {cs[i].gen, g.GenerationKey(p), &r.gen}} {
			v, err := c.cmd.Result()
			switch {
			case err == nil:
				*c.dst = v
			case !errors.Is(err, redis.Nil):
				return t, wrapErr(op, c.key, "string", err)
			}
		}
		li, counter := leaseOf(r)
		row := leaseRow("", "", "", "", li, counter, LeaseReleased)
		wm := marks[p]
		tp := TopicPartition{
			Partition: p, Owner: row.Owner, Generation: row.Generation, TTLMs: row.TTLMs,
			State: row.State, Token: row.Token,
			EarliestOffset: strconv.FormatInt(wm.Earliest, 10), HeadOffset: strconv.FormatInt(wm.Head, 10),
			Earliest: wm.Earliest, Head: wm.Head,
			Subscriptions: make([]TopicSubscription, 0, len(subs)),
		}
		field := strconv.FormatInt(int64(p), 10)
		for j, s := range subs {
			ts := TopicSubscription{Name: s, Next: -1, Paused: pauses[j].All(), PausedKeys: len(pauses[j])}
			if ts.Paused {
				ts.PausedKeys--
			}
			if v, ok := checkpoints[j][field]; ok {
				ts.Checkpoint = ptr(v)
				if next, err := strconv.ParseInt(v, 10, 64); err == nil {
					ts.Next = next
					ts.Lag = ptr(max(wm.Head-next, 0))
				}
			}
			tp.Subscriptions = append(tp.Subscriptions, ts)
		}
		tp.State = topicLeaseState(tp)
		t.Partitions = append(t.Partitions, tp)
	}
	return t, nil
}

// kafkaErr wraps an error of a Kafka call: unreachable brokers (or a
// deadline) also wrap broker.ErrUnavailable, so the CLI exits 3.
func kafkaErr(what string, err error) error {
	if errors.Is(err, kafkasource.ErrUnreachable) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("inspect: %s: %w: %w", what, broker.ErrUnavailable, err)
	}
	return fmt.Errorf("inspect: %s: %w", what, err)
}

// topicLeaseState is LeaseStateOf for a Kafka partition: records wait
// when a subscription's checkpoint is behind the head (or it has none on
// a partition holding records).
func topicLeaseState(tp TopicPartition) LeaseState {
	if tp.State != LeaseReleased {
		return tp.State // held or free
	}
	for _, s := range tp.Subscriptions {
		if (s.Lag != nil && *s.Lag > 0) || (s.Lag == nil && tp.Head > tp.Earliest) {
			return LeaseExpired
		}
	}
	return LeaseReleased
}
