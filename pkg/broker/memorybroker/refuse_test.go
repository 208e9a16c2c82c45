package memorybroker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
)

// TestWrongTypeIsRefusedAndChangesNothing puts a key of the wrong type
// where each call expects a stream, set or string, and proves the call
// fails with a *WrongTypeError naming that key and changes nothing, even
// when it would have written other keys first (a publish's index, a dead
// letter's ack).
func TestWrongTypeIsRefusedAndChangesNothing(t *testing.T) {
	l := broker.ProteanLayout
	main, backfill := l.Stream(cat, key), l.LaneStream(cat, key, broker.DefaultBackfillSuffix)
	dlq := l.DLQStream(cat, key)
	other := "o-2"
	otherLease, otherGen := l.LeaseKey(group, other), l.GenerationKey(group, other)

	type corrupt struct {
		key  string
		kind string // "string", "stream" or "set"
	}
	cases := []struct {
		name    string
		corrupt corrupt
		want    string // WrongTypeError.Want
		call    func(f *fixture, fence broker.Fence) error
	}{
		{"publish to a string lane", corrupt{backfill, "string"}, "stream", func(f *fixture, _ broker.Fence) error {
			_, err := f.b.PublishPartitioned(f.ctx, cat, key, broker.DefaultBackfillSuffix, []byte("x"))
			return err
		}},
		{"publish with a string index", corrupt{l.IndexKey("c2"), "string"}, "set", func(f *fixture, _ broker.Fence) error {
			_, err := f.b.PublishPartitioned(f.ctx, "c2", key, "", []byte("x"))
			return err
		}},
		{"record into a stream index", corrupt{l.IndexKey("c2"), "stream"}, "set", func(f *fixture, _ broker.Fence) error {
			return f.b.RecordPartition(f.ctx, "c2", key)
		}},
		{"partition keys of a string index", corrupt{l.IndexKey("c2"), "string"}, "set", func(f *fixture, _ broker.Fence) error {
			_, err := f.b.PartitionKeys(f.ctx, "c2")
			return err
		}},
		{"scan of a string index", corrupt{l.IndexKey("c2"), "string"}, "set", func(f *fixture, _ broker.Fence) error {
			_, _, err := f.b.ScanPartitionKeys(f.ctx, "c2", 0, 10)
			return err
		}},
		{"register into a string registry", corrupt{l.GroupsKey(cat), "string"}, "set", func(f *fixture, _ broker.Fence) error {
			return f.b.RegisterGroup(f.ctx, cat, group)
		}},
		{"acquire a stream lease", corrupt{otherLease, "stream"}, "string", func(f *fixture, _ broker.Fence) error {
			_, _, err := f.b.AcquirePartitionLease(f.ctx, otherLease, otherGen, owner, time.Second)
			return err
		}},
		{"acquire with a non-integer generation", corrupt{otherGen, "string"}, "integer", func(f *fixture, _ broker.Fence) error {
			_, _, err := f.b.AcquirePartitionLease(f.ctx, otherLease, otherGen, owner, time.Second)
			return err
		}},
		{"acquire with a set generation", corrupt{otherGen, "set"}, "string", func(f *fixture, _ broker.Fence) error {
			_, _, err := f.b.AcquirePartitionLease(f.ctx, otherLease, otherGen, owner, time.Second)
			return err
		}},
		{"renew a set lease", corrupt{otherLease, "set"}, "string", func(f *fixture, _ broker.Fence) error {
			_, err := f.b.RenewPartitionLease(f.ctx, broker.Fence{LeaseKey: otherLease, Token: "x:1"}, time.Second)
			return err
		}},
		{"release a stream lease", corrupt{otherLease, "stream"}, "string", func(f *fixture, _ broker.Fence) error {
			_, err := f.b.ReleasePartitionLease(f.ctx, broker.Fence{LeaseKey: otherLease, Token: "x:1"})
			return err
		}},
		{"read a string stream", corrupt{backfill, "string"}, "stream", func(f *fixture, fence broker.Fence) error {
			_, err := f.b.ReadPartitionFenced(f.ctx, fence, backfill, group, 10, broker.ReadPendingThenNew)
			return err
		}},
		{"ack on a set stream", corrupt{backfill, "set"}, "stream", func(f *fixture, fence broker.Fence) error {
			_, err := f.b.AckPartitionFenced(f.ctx, fence, backfill, group, "1-0")
			return err
		}},
		{"reclaim on a string stream", corrupt{backfill, "string"}, "stream", func(f *fixture, fence broker.Fence) error {
			_, err := f.b.ReclaimPartitionPending(f.ctx, fence, backfill, group, 0, 10)
			return err
		}},
		{"dead-letter into a string", corrupt{dlq, "string"}, "stream", func(f *fixture, fence broker.Fence) error {
			_, err := f.b.DeadLetterPartitionFenced(f.ctx, fence, main, group, "1767323045000-0", dlq, "poison")
			return err
		}},
		{"reap with a string backfill lane", corrupt{backfill, "string"}, "stream", func(f *fixture, _ broker.Fence) error {
			_, err := f.b.ReapPartition(f.ctx, cat, key, 0, "")
			return err
		}},
		{"reap with a string registry", corrupt{l.GroupsKey(cat), "string"}, "set", func(f *fixture, _ broker.Fence) error {
			_, err := f.b.ReapPartition(f.ctx, cat, key, 0, "")
			return err
		}},
		{"trim a set", corrupt{backfill, "set"}, "stream", func(f *fixture, _ broker.Fence) error {
			_, err := f.b.Trim(f.ctx, backfill, 1)
			return err
		}},
		{"trim with a string registry", corrupt{l.GroupsKey(cat), "string"}, "set", func(f *fixture, _ broker.Fence) error {
			_, err := f.b.Trim(f.ctx, main, 1)
			return err
		}},
		{"append to a set", corrupt{backfill, "set"}, "stream", func(f *fixture, _ broker.Fence) error {
			_, err := f.b.Append(f.ctx, backfill, []byte("x"))
			return err
		}},
		{"wait on a string", corrupt{backfill, "string"}, "stream", func(f *fixture, _ broker.Fence) error {
			_, err := f.b.WaitForEntries(f.ctx, map[string]string{main: "0-0", backfill: "0-0"}, time.Millisecond)
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			// A partition in use: entries, a held lease, a pending entry
			// (which a dead letter would ack), a lapsed group.
			f.publish("", 3)
			l := f.acquire()
			f.read(l.Fence, main, 1, broker.ReadNew)
			f.clock.Advance(time.Minute)
			if _, err := f.b.RenewPartitionLease(f.ctx, l.Fence, time.Hour); err != nil {
				t.Fatal(err)
			}
			switch c.corrupt.kind {
			case "string":
				if err := f.fault.PutString(f.ctx, c.corrupt.key, "not-a-number"); err != nil {
					t.Fatal(err)
				}
			case "stream":
				if _, err := f.b.Append(f.ctx, c.corrupt.key, []byte("x")); err != nil {
					t.Fatal(err)
				}
			case "set":
				memorybroker.PutSet(f.b, c.corrupt.key, "m")
			}
			before := memorybroker.Dump(f.b)

			err := c.call(f, l.Fence)
			var wt *broker.WrongTypeError
			if !errors.Is(err, broker.ErrWrongType) || !errors.As(err, &wt) {
				t.Fatalf("err = %v, want a *WrongTypeError", err)
			}
			if wt.Key != c.corrupt.key || wt.Want != c.want {
				t.Fatalf("err = %v names key %q want %q; expected key %q want %q", err, wt.Key, wt.Want, c.corrupt.key, c.want)
			}
			if after := memorybroker.Dump(f.b); after != before {
				t.Fatalf("refused call changed the state:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

func TestInvalidArgumentsAreRefusedAndChangeNothing(t *testing.T) {
	l := broker.ProteanLayout
	fence := broker.Fence{LeaseKey: l.LeaseKey(group, key), Token: "node-a:1"}
	cases := []struct {
		name string
		arg  string
		call func(f *fixture) error
	}{
		{"publish with empty category", "category", func(f *fixture) error {
			_, err := f.b.PublishPartitioned(f.ctx, "", key, "", nil)
			return err
		}},
		{"publish with a key containing ':'", "partition key", func(f *fixture) error {
			_, err := f.b.PublishPartitioned(f.ctx, cat, "a:b", "", nil)
			return err
		}},
		{"publish to the dlq lane", "lane", func(f *fixture) error {
			_, err := f.b.PublishPartitioned(f.ctx, cat, key, broker.DLQSuffix, nil)
			return err
		}},
		{"publish a key equal to its lane", "partition key", func(f *fixture) error {
			_, err := f.b.PublishPartitioned(f.ctx, cat, "low", "low", nil)
			return err
		}},
		{"record the backfill suffix as a key", "partition key", func(f *fixture) error {
			return f.b.RecordPartition(f.ctx, cat, broker.DefaultBackfillSuffix)
		}},
		{"scan with count 0", "count", func(f *fixture) error {
			_, _, err := f.b.ScanPartitionKeys(f.ctx, cat, 0, 0)
			return err
		}},
		{"register an empty group", "group", func(f *fixture) error { return f.b.RegisterGroup(f.ctx, cat, "") }},
		{"acquire with empty owner", "owner", func(f *fixture) error {
			_, _, err := f.b.AcquirePartitionLease(f.ctx, fence.LeaseKey, l.GenerationKey(group, key), "", time.Second)
			return err
		}},
		{"acquire with ttl 0", "ttl", func(f *fixture) error {
			_, _, err := f.b.AcquirePartitionLease(f.ctx, fence.LeaseKey, l.GenerationKey(group, key), owner, 0)
			return err
		}},
		{"renew with a negative ttl", "ttl", func(f *fixture) error {
			_, err := f.b.RenewPartitionLease(f.ctx, fence, -time.Second)
			return err
		}},
		{"release with an empty token", "fence token", func(f *fixture) error {
			_, err := f.b.ReleasePartitionLease(f.ctx, broker.Fence{LeaseKey: fence.LeaseKey})
			return err
		}},
		{"read with count 0", "count", func(f *fixture) error {
			_, err := f.b.ReadPartitionFenced(f.ctx, fence, f.stream(), group, 0, broker.ReadNew)
			return err
		}},
		{"read with an unknown mode", "mode", func(f *fixture) error {
			_, err := f.b.ReadPartitionFenced(f.ctx, fence, f.stream(), group, 1, broker.ReadMode(9))
			return err
		}},
		{"ack a malformed id", "id", func(f *fixture) error {
			_, err := f.b.AckPartitionFenced(f.ctx, fence, f.stream(), group, "1767323045000-0", "x-1")
			return err
		}},
		{"reclaim with a negative minIdle", "minIdle", func(f *fixture) error {
			_, err := f.b.ReclaimPartitionPending(f.ctx, fence, f.stream(), group, -1, 10)
			return err
		}},
		{"dead-letter to no stream", "dlqStream", func(f *fixture) error {
			_, err := f.b.DeadLetterPartitionFenced(f.ctx, fence, f.stream(), group, "1-0", "", "r")
			return err
		}},
		{"reap with the dlq as backfill suffix", "backfillSuffix", func(f *fixture) error {
			_, err := f.b.ReapPartition(f.ctx, cat, key, 0, broker.DLQSuffix)
			return err
		}},
		{"reap with a negative minIdle", "minIdle", func(f *fixture) error {
			_, err := f.b.ReapPartition(f.ctx, cat, key, -time.Second, "")
			return err
		}},
		{"trim to 0", "maxLen", func(f *fixture) error { _, err := f.b.Trim(f.ctx, f.stream(), 0); return err }},
		{"trim to -1", "maxLen", func(f *fixture) error { _, err := f.b.Trim(f.ctx, f.stream(), -1); return err }},
		{"append to an empty stream name", "stream", func(f *fixture) error { _, err := f.b.Append(f.ctx, "", nil); return err }},
		{"watch an empty category", "category", func(f *fixture) error {
			_, err := f.b.WatchPartitions(f.ctx, "")
			return err
		}},
		{"wait on nothing", "after", func(f *fixture) error {
			_, err := f.b.WaitForEntries(f.ctx, nil, time.Second)
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			f.publish("", 2)
			ll := f.acquire()
			f.read(ll.Fence, f.stream(), 1, broker.ReadNew)
			before := memorybroker.Dump(f.b)
			wantInvalid(t, c.call(f), c.arg)
			if after := memorybroker.Dump(f.b); after != before {
				t.Fatalf("refused call changed the state:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// TestInlineRefusesEveryPartitioningMethod: without StreamPartitioning
// every partitioning method fails loudly, naming itself, and never
// half-works; the plain stream still works.
func TestInlineRefusesEveryPartitioningMethod(t *testing.T) {
	b := memorybroker.NewInline(memorybroker.WithClock(memorybroker.NewManualClock(epoch)))
	if c := b.Capabilities(); c.Has(broker.StreamPartitioning) || c.String() != "none" {
		t.Fatalf("inline capabilities = %s", c)
	}
	ctx := t.Context()
	l := b.Layout()
	f := broker.Fence{LeaseKey: l.LeaseKey(group, key), Token: broker.FenceToken(owner, 1)}
	s := l.Stream(cat, key)
	calls := []struct {
		method string
		call   func() error
	}{
		{"RecordPartition", func() error { return b.RecordPartition(ctx, cat, key) }},
		{"PartitionKeys", func() error { _, err := b.PartitionKeys(ctx, cat); return err }},
		{"ScanPartitionKeys", func() error { _, _, err := b.ScanPartitionKeys(ctx, cat, 0, 10); return err }},
		{"RegisterGroup", func() error { return b.RegisterGroup(ctx, cat, group) }},
		{"RegisteredGroups", func() error { _, err := b.RegisteredGroups(ctx, cat); return err }},
		{"AcquirePartitionLease", func() error {
			_, _, err := b.AcquirePartitionLease(ctx, f.LeaseKey, l.GenerationKey(group, key), owner, time.Second)
			return err
		}},
		{"RenewPartitionLease", func() error { _, err := b.RenewPartitionLease(ctx, f, time.Second); return err }},
		{"ReleasePartitionLease", func() error { _, err := b.ReleasePartitionLease(ctx, f); return err }},
		{"ReadPartitionFenced", func() error {
			_, err := b.ReadPartitionFenced(ctx, f, s, group, 10, broker.ReadPendingThenNew)
			return err
		}},
		{"AckPartitionFenced", func() error { _, err := b.AckPartitionFenced(ctx, f, s, group, "1-1"); return err }},
		{"ReclaimPartitionPending", func() error {
			_, err := b.ReclaimPartitionPending(ctx, f, s, group, 0, 10)
			return err
		}},
		{"DeadLetterPartitionFenced", func() error {
			_, err := b.DeadLetterPartitionFenced(ctx, f, s, group, "1-1", l.DLQStream(cat, key), "r")
			return err
		}},
		{"ReapPartition", func() error { _, err := b.ReapPartition(ctx, cat, key, 0, ""); return err }},
		{"Trim", func() error { _, err := b.Trim(ctx, s, 10); return err }},
		{"PublishPartitioned", func() error { _, err := b.PublishPartitioned(ctx, cat, key, "", []byte("x")); return err }},
		{"WatchPartitions", func() error { _, err := b.WatchPartitions(ctx, cat); return err }},
		// Even bad input is refused as unsupported: the capability comes
		// first, so a caller learns what is wrong with the deployment.
		{"Trim", func() error { _, err := b.Trim(ctx, s, -1); return err }},
	}
	for _, c := range calls {
		err := c.call()
		var ue *broker.UnsupportedError
		if !errors.Is(err, broker.ErrPartitioningUnsupported) || !errors.As(err, &ue) {
			t.Fatalf("%s: err = %v, want an *UnsupportedError", c.method, err)
		}
		if ue.Op != c.method {
			t.Fatalf("%s: error names %q", c.method, ue.Op)
		}
	}
	if dump := memorybroker.Dump(b); dump != "" {
		t.Fatalf("refused calls wrote:\n%s", dump)
	}

	id, err := b.Append(ctx, cat, []byte("x"))
	if err != nil || id != "1767323045000-0" {
		t.Fatalf("Append on the inline broker = %s, %v", id, err)
	}
	ready, err := b.WaitForEntries(ctx, map[string]string{cat: "0-0"}, time.Second)
	if err != nil || len(ready) != 1 {
		t.Fatalf("WaitForEntries on the inline broker = %v, %v", ready, err)
	}
}

func TestCanceledContextIsRefused(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := f.b.PublishPartitioned(ctx, cat, key, "", nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("publish with a canceled context: %v", err)
	}
	if _, err := f.b.Append(ctx, "s", nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("append with a canceled context: %v", err)
	}
	if dump := memorybroker.Dump(f.b); dump != "" {
		t.Fatalf("canceled calls wrote:\n%s", dump)
	}
}
