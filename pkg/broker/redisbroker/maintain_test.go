package redisbroker_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

// addIDs appends entries with explicit ids, so that a test can pick ids
// whose order differs between numeric and string comparison.
func addIDs(t *testing.T, c *redis.Client, stream string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := c.XAdd(t.Context(), &redis.XAddArgs{Stream: stream, ID: id, Values: []any{"data", id}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func streamIDs(t *testing.T, c *redis.Client, stream string) []string {
	t.Helper()
	var out []string
	for _, m := range c.XRange(t.Context(), stream, "-", "+").Val() {
		out = append(out, m.ID)
	}
	return out
}

func TestTrimFloor(t *testing.T) {
	// "9-0" < "10-0" < "100-0" numerically, but not as strings: the
	// script must compare ids as numbers.
	all := []string{"1-0", "2-0", "9-0", "10-0", "10-1", "100-0", "101-0", "1000-0"}
	tests := []struct {
		name   string
		maxLen int64
		setup  func(t *testing.T, c *redis.Client, st string)
		want   []string
	}{
		{
			name: "no group caps at maxLen", maxLen: 3,
			setup: func(t *testing.T, c *redis.Client, st string) {},
			want:  all[5:],
		},
		{
			name: "caught-up group caps at maxLen", maxLen: 2,
			setup: func(t *testing.T, c *redis.Client, st string) {
				c.XGroupCreate(t.Context(), st, "g", "$")
			},
			want: all[6:],
		},
		{
			name: "floor at a group's last-delivered id", maxLen: 1,
			setup: func(t *testing.T, c *redis.Client, st string) {
				c.XGroupCreate(t.Context(), st, "g", "$")
				c.XGroupCreate(t.Context(), st, "lagging", "9-0")
			},
			want: all[2:], // 9-0 was delivered; it stays, as nothing at the floor goes
		},
		{
			name: "floor at the oldest pending id", maxLen: 1,
			setup: func(t *testing.T, c *redis.Client, st string) {
				c.XGroupCreate(t.Context(), st, "g", "2-0")
				// Deliver 9-0 .. 10-1, ack only 10-1: 9-0 and 10-0 stay pending.
				c.XReadGroup(t.Context(), &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{st, ">"}, Count: 3})
				c.XAck(t.Context(), st, "g", "10-1")
			},
			want: all[2:],
		},
		{
			name: "maxLen cutoff below the floor", maxLen: 6,
			setup: func(t *testing.T, c *redis.Client, st string) {
				c.XGroupCreate(t.Context(), st, "g", "100-0")
			},
			want: all[2:], // the newest 6, although the group needs only 100-0 on
		},
		{
			name: "cutoff found from the newest end", maxLen: 2,
			setup: func(t *testing.T, c *redis.Client, st string) {
				c.XGroupCreate(t.Context(), st, "g", "$")
			},
			want: all[6:],
		},
		{
			name: "cutoff found from the oldest end", maxLen: 7,
			setup: func(t *testing.T, c *redis.Client, st string) {
				c.XGroupCreate(t.Context(), st, "g", "$")
			},
			want: all[1:],
		},
		{
			name: "group that never read keeps everything", maxLen: 1,
			setup: func(t *testing.T, c *redis.Client, st string) {
				c.XGroupCreate(t.Context(), st, "g", "$")
				c.XGroupCreate(t.Context(), st, "new", "0")
			},
			want: all,
		},
		{
			name: "registered group not yet on the stream keeps everything", maxLen: 1,
			setup: func(t *testing.T, c *redis.Client, st string) {
				c.XGroupCreate(t.Context(), st, "g", "$")
				c.SAdd(t.Context(), layout.GroupsKey(cat), "g", "late")
			},
			want: all,
		},
		{
			name: "maxLen above the length removes nothing", maxLen: 100,
			setup: func(t *testing.T, c *redis.Client, st string) {},
			want:  all,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, c := newBroker(t)
			st := layout.Stream(cat, key)
			addIDs(t, c, st, all...)
			tt.setup(t, c, st)
			n, err := b.Trim(t.Context(), st, tt.maxLen)
			if err != nil {
				t.Fatal(err)
			}
			got := streamIDs(t, c, st)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("kept %v, want %v", got, tt.want)
			}
			if n != int64(len(all)-len(tt.want)) {
				t.Fatalf("trim reports %d removed, removed %d", n, len(all)-len(got))
			}
		})
	}
}

func TestTrimOfBackfillLaneConsultsTheRegistry(t *testing.T) {
	b, _ := newBroker(t)
	if err := b.RegisterGroup(t.Context(), cat, group); err != nil {
		t.Fatal(err)
	}
	publish(t, b, key, broker.DefaultBackfillSuffix, 5)
	if n, err := b.Trim(t.Context(), layout.LaneStream(cat, key, broker.DefaultBackfillSuffix), 1); err != nil || n != 0 {
		t.Fatalf("trim of a lane the registered group never read = %d, %v", n, err)
	}
}

func TestTrimRefusals(t *testing.T) {
	b, c := newBroker(t)
	st := layout.Stream(cat, key)
	publish(t, b, key, "", 3)
	for _, maxLen := range []int64{0, -5} {
		_, err := b.Trim(t.Context(), st, maxLen)
		wantInvalid(t, "trim", err, "maxLen")
	}
	c.Set(t.Context(), "str", "x", 0)
	before := snapshot(t, c)
	_, err := b.Trim(t.Context(), "str", 1)
	wantWrongType(t, "trim of a string", err, "str", "stream")
	wantUnchanged(t, c, before)

	// A registry of the wrong type is refused too, not skipped.
	server.FlushAll(t)
	publish(t, b, key, "", 3)
	c.Set(t.Context(), layout.GroupsKey(cat), "x", 0)
	before = snapshot(t, c)
	_, err = b.Trim(t.Context(), st, 1)
	wantWrongType(t, "trim with a string registry", err, layout.GroupsKey(cat), "set")
	wantUnchanged(t, c, before)
}

// coldPartition publishes to both lanes, registers group and drains both
// lanes as group.
func coldPartition(t *testing.T, b broker.PartitionedBroker, k string) broker.Lease {
	t.Helper()
	if err := b.RegisterGroup(t.Context(), cat, group); err != nil {
		t.Fatal(err)
	}
	l, ok, err := b.AcquirePartitionLease(t.Context(), layout.LeaseKey(group, k), layout.GenerationKey(group, k), owner, time.Minute)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	for _, lane := range []string{"", broker.DefaultBackfillSuffix} {
		for i := 0; i < 2; i++ {
			if _, err := b.PublishPartitioned(t.Context(), cat, k, lane, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		st := layout.LaneStream(cat, k, lane)
		msgs, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 10, broker.ReadNew)
		if err != nil || len(msgs) != 2 {
			t.Fatal(len(msgs), err)
		}
		if _, err := b.AckPartitionFenced(t.Context(), l.Fence, st, group, msgIDs(msgs)...); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func TestReapVerdicts(t *testing.T) {
	st := layout.Stream(cat, key)
	bf := layout.LaneStream(cat, key, broker.DefaultBackfillSuffix)
	tests := []struct {
		name          string
		minIdle       time.Duration
		setup         func(t *testing.T, b broker.PartitionedBroker, c *redis.Client, l broker.Lease)
		stream, group string
		reason        string
	}{
		{
			name: "pending entries", stream: st, group: group,
			reason: `group "app.handlers.Projector" has 1 pending entries on "shop::order:o-1"`,
			setup: func(t *testing.T, b broker.PartitionedBroker, c *redis.Client, l broker.Lease) {
				b.PublishPartitioned(t.Context(), cat, key, "", []byte("x"))
				b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 10, broker.ReadNew)
			},
		},
		{
			name: "group behind", stream: bf, group: group, reason: "has been delivered up to",
			setup: func(t *testing.T, b broker.PartitionedBroker, c *redis.Client, l broker.Lease) {
				b.PublishPartitioned(t.Context(), cat, key, broker.DefaultBackfillSuffix, []byte("x"))
			},
		},
		{
			name: "no group on a non-empty lane", stream: st, group: "", reason: "has entries but no consumer group",
			setup: func(t *testing.T, b broker.PartitionedBroker, c *redis.Client, l broker.Lease) {
				c.XGroupDestroy(t.Context(), st, group)
			},
		},
		{
			name: "registered group absent", stream: st, group: "late", reason: `registered group "late" has not read`,
			setup: func(t *testing.T, b broker.PartitionedBroker, c *redis.Client, l broker.Lease) {
				b.RegisterGroup(t.Context(), cat, "late")
			},
		},
		{
			name: "newest entry too young", minIdle: time.Hour, stream: st, reason: "younger than minIdle",
			setup: func(t *testing.T, b broker.PartitionedBroker, c *redis.Client, l broker.Lease) {},
		},
		{
			name: "deleted pending body still blocks", stream: st, group: group, reason: "pending",
			setup: func(t *testing.T, b broker.PartitionedBroker, c *redis.Client, l broker.Lease) {
				id, _ := b.PublishPartitioned(t.Context(), cat, key, "", []byte("x"))
				b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 10, broker.ReadNew)
				c.XDel(t.Context(), st, id)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, c := newBroker(t)
			l := coldPartition(t, b, key)
			tt.setup(t, b, c, l)
			before := snapshot(t, c)
			res, err := b.ReapPartition(t.Context(), cat, key, tt.minIdle, "")
			if err != nil {
				t.Fatal(err)
			}
			if res.Reaped || res.Stream != tt.stream || res.Group != tt.group || !strings.Contains(res.Reason, tt.reason) {
				t.Fatalf("verdict = %+v, want kept on %q by %q with reason containing %q", res, tt.stream, tt.group, tt.reason)
			}
			wantUnchanged(t, c, before)
		})
	}
}

func TestReapDeletesOnlyLanesAndIndexEntry(t *testing.T) {
	b, c := newBroker(t)
	l := coldPartition(t, b, key)
	dlq := layout.DLQStream(cat, key)
	if _, err := b.Append(t.Context(), dlq, []byte("dead")); err != nil {
		t.Fatal(err)
	}
	if err := b.RecordPartition(t.Context(), cat, "other"); err != nil {
		t.Fatal(err)
	}
	res, err := b.ReapPartition(t.Context(), cat, key, 0, "")
	if err != nil || !res.Reaped {
		t.Fatalf("reap = %+v, %v", res, err)
	}
	keys := c.Keys(t.Context(), "*").Val()
	slices.Sort(keys)
	want := []string{layout.GenerationKey(group, key), layout.LeaseKey(group, key), layout.GroupsKey(cat), layout.IndexKey(cat), dlq}
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Fatalf("keys after reap = %v, want %v", keys, want)
	}
	if m := c.SMembers(t.Context(), layout.IndexKey(cat)).Val(); !slices.Equal(m, []string{"other"}) {
		t.Fatalf("index after reap = %v", m)
	}
	// The lease is untouched: its holder still holds it.
	if ok, err := b.RenewPartitionLease(t.Context(), l.Fence, time.Minute); err != nil || !ok {
		t.Fatalf("renew after reap = %v, %v", ok, err)
	}
}

func TestReapRefusals(t *testing.T) {
	b, c := newBroker(t)
	_, err := b.ReapPartition(t.Context(), cat, key, 0, broker.DLQSuffix)
	wantInvalid(t, "reap with the dlq as backfill", err, "backfillSuffix")
	_, err = b.ReapPartition(t.Context(), cat, "a:b", 0, "")
	wantInvalid(t, "reap of a bad key", err, "partition key")
	_, err = b.ReapPartition(t.Context(), cat, key, -time.Second, "")
	wantInvalid(t, "reap with negative minIdle", err, "minIdle")

	coldPartition(t, b, key)
	c.Set(t.Context(), layout.LaneStream(cat, key, "slow"), "x", 0)
	before := snapshot(t, c)
	_, err = b.ReapPartition(t.Context(), cat, key, 0, "slow")
	wantWrongType(t, "reap with a string lane", err, layout.LaneStream(cat, key, "slow"), "stream")
	wantUnchanged(t, c, before)

	server.FlushAll(t)
	coldPartition(t, b, key)
	c.Del(t.Context(), layout.IndexKey(cat))
	c.Set(t.Context(), layout.IndexKey(cat), "x", 0)
	before = snapshot(t, c)
	_, err = b.ReapPartition(t.Context(), cat, key, 0, "")
	wantWrongType(t, "reap with a string index", err, layout.IndexKey(cat), "set")
	wantUnchanged(t, c, before)
}
