package memorybroker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
)

// epoch is where every test clock starts: 1767323045000 ms.
var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	cat   = "shop::order"
	key   = "o-1"
	group = "app.Projector"
	owner = "node-a"
)

type fixture struct {
	t     *testing.T
	ctx   context.Context
	clock *memorybroker.ManualClock
	b     *memorybroker.Broker
	l     broker.Layout
	fault memorybroker.Faults
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	clock := memorybroker.NewManualClock(epoch)
	b := memorybroker.New(memorybroker.WithClock(clock))
	return &fixture{t: t, ctx: context.Background(), clock: clock, b: b, l: b.Layout(), fault: b.Faults()}
}

func (f *fixture) stream() string { return f.l.Stream(cat, key) }

func (f *fixture) publish(lane string, n int) []string {
	f.t.Helper()
	var ids []string
	for i := range n {
		id, err := f.b.PublishPartitioned(f.ctx, cat, key, lane, []byte{'a' + byte(i%26)})
		if err != nil {
			f.t.Fatalf("publish: %v", err)
		}
		ids = append(ids, id)
	}
	return ids
}

func (f *fixture) acquireAs(o string, ttl time.Duration) broker.Lease {
	f.t.Helper()
	l, ok, err := f.b.AcquirePartitionLease(f.ctx, f.l.LeaseKey(group, key), f.l.GenerationKey(group, key), o, ttl)
	if err != nil || !ok {
		f.t.Fatalf("acquire by %s: acquired=%v err=%v", o, ok, err)
	}
	return l
}

func (f *fixture) acquire() broker.Lease { return f.acquireAs(owner, time.Hour) }

func (f *fixture) read(fence broker.Fence, stream string, count int64, mode broker.ReadMode) []broker.Message {
	f.t.Helper()
	msgs, err := f.b.ReadPartitionFenced(f.ctx, fence, stream, group, count, mode)
	if err != nil {
		f.t.Fatalf("read: %v", err)
	}
	return msgs
}

func (f *fixture) ack(fence broker.Fence, stream string, ids ...string) int64 {
	f.t.Helper()
	n, err := f.b.AckPartitionFenced(f.ctx, fence, stream, group, ids...)
	if err != nil {
		f.t.Fatalf("ack: %v", err)
	}
	return n
}

func (f *fixture) pending(stream string) []memorybroker.PendingEntry {
	f.t.Helper()
	p, err := f.b.PendingEntries(f.ctx, stream, group, 0)
	if err != nil {
		f.t.Fatalf("pending entries: %v", err)
	}
	return p
}

func (f *fixture) ids(stream string) []string {
	f.t.Helper()
	ids, err := f.fault.StreamIDs(f.ctx, stream)
	if err != nil {
		f.t.Fatalf("stream ids: %v", err)
	}
	return ids
}

func msgIDs(msgs []broker.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

func wantInvalid(t *testing.T, err error, arg string) {
	t.Helper()
	var ia *broker.InvalidArgumentError
	if !errors.As(err, &ia) || !errors.Is(err, broker.ErrInvalidArgument) {
		t.Fatalf("err = %v, want an *InvalidArgumentError", err)
	}
	if ia.Arg != arg {
		t.Fatalf("err = %v names %q, want %q", err, ia.Arg, arg)
	}
}
