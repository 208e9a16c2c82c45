package memorybroker

import (
	"context"
	"strconv"
	"strings"

	"github.com/protctl/protctl/pkg/broker"
)

// watchBuffer is how many wake-ups a watcher's channel holds; one more
// closes it.
const watchBuffer = 1024

// RecordPartition adds key to category's index (SADD). Idempotent.
func (b *Broker) RecordPartition(ctx context.Context, category, key string) error {
	const op = "record partition"
	if err := b.begin(ctx, "RecordPartition"); err != nil {
		return err
	}
	l := b.cfg.layout
	if err := firstErr(l.ValidateName(op, "category", category), b.validKey(op, key, b.cfg.backfillSuffix)); err != nil {
		return err
	}
	idxKey := l.IndexKey(category)
	now := b.lock()
	defer b.mu.Unlock()
	idx, err := b.setAt(op, idxKey, now)
	if err != nil {
		return err
	}
	b.ensureSet(idxKey, idx).add(key)
	return nil
}

// PartitionKeys returns category's indexed keys in lexical order; nil for
// an unknown category.
func (b *Broker) PartitionKeys(ctx context.Context, category string) ([]string, error) {
	const op = "partition keys"
	if err := b.begin(ctx, "PartitionKeys"); err != nil {
		return nil, err
	}
	l := b.cfg.layout
	if err := l.ValidateName(op, "category", category); err != nil {
		return nil, err
	}
	now := b.lock()
	defer b.mu.Unlock()
	idx, err := b.setAt(op, l.IndexKey(category), now)
	if err != nil || idx == nil {
		return nil, err
	}
	return idx.sorted(), nil
}

// ScanPartitionKeys pages through category's index with SSCAN's guarantee:
// a key indexed for the whole scan is returned at least once. Pages hold
// about count keys (more when keys share a hash).
func (b *Broker) ScanPartitionKeys(ctx context.Context, category string, cursor uint64, count int64) ([]string, uint64, error) {
	const op = "scan partition keys"
	if err := b.begin(ctx, "ScanPartitionKeys"); err != nil {
		return nil, 0, err
	}
	l := b.cfg.layout
	if err := firstErr(l.ValidateName(op, "category", category), positive(op, "count", count)); err != nil {
		return nil, 0, err
	}
	now := b.lock()
	defer b.mu.Unlock()
	idx, err := b.setAt(op, l.IndexKey(category), now)
	if err != nil || idx == nil {
		return nil, 0, err
	}
	keys, next := idx.scan(cursor, count)
	return keys, next, nil
}

// RegisterGroup adds group to category's registered groups. Idempotent.
func (b *Broker) RegisterGroup(ctx context.Context, category, group string) error {
	const op = "register group"
	if err := b.begin(ctx, "RegisterGroup"); err != nil {
		return err
	}
	l := b.cfg.layout
	if err := firstErr(l.ValidateName(op, "category", category), l.ValidateName(op, "group", group)); err != nil {
		return err
	}
	key := l.GroupsKey(category)
	now := b.lock()
	defer b.mu.Unlock()
	groups, err := b.setAt(op, key, now)
	if err != nil {
		return err
	}
	b.ensureSet(key, groups).add(group)
	return nil
}

// RegisteredGroups returns category's registered groups in lexical order;
// nil when there are none.
func (b *Broker) RegisteredGroups(ctx context.Context, category string) ([]string, error) {
	const op = "registered groups"
	if err := b.begin(ctx, "RegisteredGroups"); err != nil {
		return nil, err
	}
	l := b.cfg.layout
	if err := l.ValidateName(op, "category", category); err != nil {
		return nil, err
	}
	now := b.lock()
	defer b.mu.Unlock()
	groups, err := b.setAt(op, l.GroupsKey(category), now)
	if err != nil || groups == nil {
		return nil, err
	}
	return groups.sorted(), nil
}

// PublishPartitioned validates key, appends data to the partition's lane
// and records key in the index in one atomic step, then wakes the
// category's watchers. Lane "" is the main lane; any other lane is a
// suffix (e.g. broker.DefaultBackfillSuffix) except "dlq", which is
// reserved for DeadLetterPartitionFenced, and a suffix containing ':'.
func (b *Broker) PublishPartitioned(ctx context.Context, category, key, lane string, data []byte) (string, error) {
	const op = "publish"
	if err := b.begin(ctx, "PublishPartitioned"); err != nil {
		return "", err
	}
	l := b.cfg.layout
	if err := l.ValidateName(op, "category", category); err != nil {
		return "", err
	}
	if lane == broker.DLQSuffix || strings.Contains(lane, ":") {
		return "", invalid(op, "lane", strconv.Quote(lane), `must not be "dlq" or contain ":"`)
	}
	if err := b.validKey(op, key, b.cfg.backfillSuffix); err != nil {
		return "", err
	}
	if lane != "" && key == lane {
		return "", invalid(op, "partition key", strconv.Quote(key), "is the lane's suffix")
	}
	idxKey, streamKey := l.IndexKey(category), l.LaneStream(category, key, lane)
	data = copyData(data)

	now := b.lock()
	defer b.mu.Unlock()
	idx, err := b.setAt(op, idxKey, now)
	if err != nil {
		return "", err
	}
	s, err := b.streamAt(op, streamKey, now)
	if err != nil {
		return "", err
	}
	id := b.ensureStream(streamKey, s).add(msOf(now), data, nil)
	b.ensureSet(idxKey, idx).add(key)
	b.appended(streamKey)
	b.wake(category, key)
	return id.String(), nil
}

// wake signals category's watchers that key received an entry, closing
// the channel of a watcher whose buffer is full. Called with mu held, so
// a watcher that receives key can already read the entry.
func (b *Broker) wake(category, key string) {
	b.watchers.Signal(category, key)
}

// Append adds data as the entry's data field of stream (XADD *) and
// returns the entry id. It works on an inline broker too.
func (b *Broker) Append(ctx context.Context, stream string, data []byte) (string, error) {
	const op = "append"
	if err := firstErr(ctxErr(ctx, op), nonEmpty(op, "stream", stream)); err != nil {
		return "", err
	}
	data = copyData(data)
	now := b.lock()
	defer b.mu.Unlock()
	s, err := b.streamAt(op, stream, now)
	if err != nil {
		return "", err
	}
	id := b.ensureStream(stream, s).add(msOf(now), data, nil)
	b.appended(stream)
	return id.String(), nil
}

// WatchPartitions returns a channel that receives the key of every
// partition of category published to through PublishPartitioned, until
// ctx ends or the reader falls behind by more than watchBuffer keys; then
// the channel is closed, and a reader that wants every hint watches again
// and re-reads (as with redisbroker). No goroutine runs while ctx is
// live.
func (b *Broker) WatchPartitions(ctx context.Context, category string) (<-chan string, error) {
	const op = "watch partitions"
	if err := b.begin(ctx, "WatchPartitions"); err != nil {
		return nil, err
	}
	if err := b.cfg.layout.ValidateName(op, "category", category); err != nil {
		return nil, err
	}
	return b.watchers.Add(ctx, category, watchBuffer), nil
}
