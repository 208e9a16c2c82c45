package memorybroker_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
)

func TestTrimKeepsWhatAnyGroupStillNeeds(t *testing.T) {
	cases := []struct {
		name    string
		setup   func(f *fixture, ids []string) // ten entries published
		maxLen  int64
		removed int64
	}{
		{"no groups caps at maxLen", func(*fixture, []string) {}, 3, 7},
		{"under maxLen removes nothing", func(*fixture, []string) {}, 10, 0},
		{"a caught-up group lets maxLen decide", func(f *fixture, ids []string) {
			l := f.acquire()
			f.ack(l.Fence, f.stream(), msgIDs(f.read(l.Fence, f.stream(), 10, broker.ReadNew))...)
		}, 3, 7},
		{"the oldest pending entry is the floor", func(f *fixture, ids []string) {
			l := f.acquire()
			f.read(l.Fence, f.stream(), 10, broker.ReadNew)
			f.ack(l.Fence, f.stream(), ids[:4]...)
			f.ack(l.Fence, f.stream(), ids[5:]...)
		}, 3, 4},
		{"the last-delivered entry is the floor", func(f *fixture, ids []string) {
			l := f.acquire()
			f.ack(l.Fence, f.stream(), msgIDs(f.read(l.Fence, f.stream(), 5, broker.ReadNew))...)
		}, 3, 4},
		{"a group that never read keeps everything", func(f *fixture, ids []string) {
			if err := f.fault.CreateGroup(f.ctx, f.stream(), "other", "0"); err != nil {
				f.t.Fatal(err)
			}
		}, 1, 0},
		{"the slowest of two groups decides", func(f *fixture, ids []string) {
			l := f.acquire()
			f.ack(l.Fence, f.stream(), msgIDs(f.read(l.Fence, f.stream(), 10, broker.ReadNew))...)
			if err := f.fault.CreateGroup(f.ctx, f.stream(), "other", ids[2]); err != nil {
				f.t.Fatal(err)
			}
		}, 1, 2},
		{"a registered group absent from the stream keeps everything", func(f *fixture, ids []string) {
			l := f.acquire()
			f.ack(l.Fence, f.stream(), msgIDs(f.read(l.Fence, f.stream(), 10, broker.ReadNew))...)
			if err := f.b.RegisterGroup(f.ctx, cat, "later.Group"); err != nil {
				f.t.Fatal(err)
			}
		}, 1, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			ids := f.publish("", 10)
			c.setup(f, ids)
			n, err := f.b.Trim(f.ctx, f.stream(), c.maxLen)
			if err != nil {
				t.Fatal(err)
			}
			if n != c.removed {
				t.Fatalf("trim removed %d, want %d", n, c.removed)
			}
			if got := f.ids(f.stream()); !slices.Equal(got, ids[n:]) {
				t.Fatalf("left %v, want the newest %v", got, ids[n:])
			}
		})
	}
	f := newFixture(t)
	if n, err := f.b.Trim(f.ctx, "missing", 1); n != 0 || err != nil {
		t.Fatalf("trim of a missing stream = %d, %v", n, err)
	}
}

func TestReapSaysWhatKeepsAPartition(t *testing.T) {
	main := broker.ProteanLayout.Stream(cat, key)
	backfill := broker.ProteanLayout.LaneStream(cat, key, broker.DefaultBackfillSuffix)
	// consumeAll reads and acks everything of a lane as group.
	consumeAll := func(f *fixture, l broker.Lease, stream string) {
		f.ack(l.Fence, stream, msgIDs(f.read(l.Fence, stream, 100, broker.ReadNew))...)
	}
	cases := []struct {
		name   string
		setup  func(f *fixture)
		stream string
		group  string
		reason string
	}{
		{"a lane without group", func(f *fixture) {
			f.publish("", 2)
		}, main, "", `"shop::order:o-1" has entries but no consumer group`},
		{"pending entries", func(f *fixture) {
			f.publish("", 3)
			l := f.acquire()
			f.read(l.Fence, main, 100, broker.ReadNew)
		}, main, group, `group "app.Projector" has 3 pending entries on "shop::order:o-1"`},
		{"a group behind the last entry", func(f *fixture) {
			f.publish("", 3)
			l := f.acquire()
			f.ack(l.Fence, main, msgIDs(f.read(l.Fence, main, 1, broker.ReadNew))...)
		}, main, group, `group "app.Projector" has been delivered up to 1767323045000-0 of "shop::order:o-1", whose last entry is 1767323045000-2`},
		{"a registered group that never read", func(f *fixture) {
			f.publish("", 1)
			consumeAll(f, f.acquire(), main)
			if err := f.b.RegisterGroup(f.ctx, cat, "billing"); err != nil {
				f.t.Fatal(err)
			}
		}, main, "billing", `registered group "billing" has not read "shop::order:o-1" yet`},
		{"a young lane", func(f *fixture) {
			f.publish("", 1)
			consumeAll(f, f.acquire(), main)
			f.clock.Advance(30 * time.Second)
		}, main, "", `the newest entry of "shop::order:o-1" is 30s old, younger than minIdle`},
		{"a young lane whose newest entry was deleted", func(f *fixture) {
			ids := f.publish("", 2)
			l := f.acquire()
			f.read(l.Fence, main, 1, broker.ReadNew)
			f.ack(l.Fence, main, ids[0])
			if err := f.fault.DeleteEntry(f.ctx, main, ids[1]); err != nil {
				f.t.Fatal(err)
			}
		}, main, "", `the newest entry of "shop::order:o-1" is 0s old, younger than minIdle`},
		{"a busy backfill lane behind a clean main lane", func(f *fixture) {
			f.publish("", 1)
			f.publish(broker.DefaultBackfillSuffix, 1)
			l := f.acquire()
			consumeAll(f, l, main)
			f.clock.Advance(time.Hour)
		}, backfill, "", `"shop::order:o-1:backfill" has entries but no consumer group`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			c.setup(f)
			before := memorybroker.Dump(f.b)
			res, err := f.b.ReapPartition(f.ctx, cat, key, time.Minute, "")
			if err != nil {
				t.Fatal(err)
			}
			want := broker.ReapResult{Stream: c.stream, Group: c.group, Reason: c.reason}
			if diff := cmp.Diff(want, res); diff != "" {
				t.Fatalf("reap (-want +got):\n%s", diff)
			}
			if after := memorybroker.Dump(f.b); after != before {
				t.Fatalf("refused reap changed the state:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

func TestReapRemovesBothLanesAndKeepsGenerationsAndDeadLetters(t *testing.T) {
	f := newFixture(t)
	ids := f.publish("", 2)
	f.publish(broker.DefaultBackfillSuffix, 1)
	l := f.acquire()
	backfill := f.l.LaneStream(cat, key, broker.DefaultBackfillSuffix)
	f.read(l.Fence, f.stream(), 1, broker.ReadNew)
	if _, err := f.b.DeadLetterPartitionFenced(f.ctx, l.Fence, f.stream(), group, ids[0], f.l.DLQStream(cat, key), "poison"); err != nil {
		t.Fatal(err)
	}
	f.ack(l.Fence, f.stream(), msgIDs(f.read(l.Fence, f.stream(), 10, broker.ReadNew))...)
	f.ack(l.Fence, backfill, msgIDs(f.read(l.Fence, backfill, 10, broker.ReadNew))...)
	f.clock.Advance(time.Minute)

	res, err := f.b.ReapPartition(f.ctx, cat, key, time.Minute, "")
	if err != nil || !res.Reaped {
		t.Fatalf("reap = %+v, %v", res, err)
	}
	for k, want := range map[string]bool{
		f.stream():                    false,
		backfill:                      false,
		f.l.IndexKey(cat):             false, // emptied sets are deleted, as in Redis
		f.l.DLQStream(cat, key):       true,
		f.l.GenerationKey(group, key): true,
		f.l.LeaseKey(group, key):      true, // leases are not the reaper's business
	} {
		if ok, _ := f.fault.Exists(f.ctx, k); ok != want {
			t.Fatalf("after reap, %s exists = %v, want %v", k, ok, want)
		}
	}
	if keys, _ := f.b.PartitionKeys(f.ctx, cat); keys != nil {
		t.Fatalf("index after reap = %v", keys)
	}
}

func TestScanPartitionKeysReturnsEveryKeyPresentThroughout(t *testing.T) {
	f := newFixture(t)
	var stay []string
	for i := range 500 {
		k := "k" + string(rune('a'+i%26)) + strconv.Itoa(i)
		stay = append(stay, k)
		if err := f.b.RecordPartition(f.ctx, cat, k); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]int{}
	var cursor uint64
	for page := 0; ; page++ {
		keys, next, err := f.b.ScanPartitionKeys(f.ctx, cat, cursor, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 20 {
			t.Fatalf("page of %d keys for count 7", len(keys))
		}
		for _, k := range keys {
			seen[k]++
		}
		if page == 10 {
			// Churn mid-scan: keys come and go (reaped, re-recorded).
			for i := range 300 {
				if err := f.b.RecordPartition(f.ctx, cat, "new"+strconv.Itoa(i)); err != nil {
					t.Fatal(err)
				}
				if _, err := f.b.ReapPartition(f.ctx, cat, "new"+strconv.Itoa(i/2), 0, ""); err != nil {
					t.Fatal(err)
				}
			}
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	for _, k := range stay {
		if seen[k] != 1 {
			t.Fatalf("key %s seen %d times, want once", k, seen[k])
		}
	}
	if keys, next, err := f.b.ScanPartitionKeys(f.ctx, "unknown", 0, 10); keys != nil || next != 0 || err != nil {
		t.Fatalf("scan of an unknown category = %v, %d, %v", keys, next, err)
	}
}
