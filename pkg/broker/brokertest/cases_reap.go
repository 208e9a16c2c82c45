package brokertest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// coldPartition publishes to both lanes of key, registers group, and
// drains both lanes as group under a lease it then releases.
func (s *Suite) coldPartition(t *testing.T, k string) {
	t.Helper()
	if err := s.B.RegisterGroup(s.Ctx, cat, group); err != nil {
		t.Fatal(err)
	}
	s.publish(t, k, "", 3)
	s.publish(t, k, broker.DefaultBackfillSuffix, 2)
	l := s.acquire(t, k, owner, long)
	s.drain(t, l.Fence, s.stream(k))
	s.drain(t, l.Fence, s.backfill(k))
	if ok, err := s.B.ReleasePartitionLease(s.Ctx, l.Fence); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
}

// wantKept asserts a refused reap: the verdict names the blocker and the
// partition is untouched.
func (s *Suite) wantKept(t *testing.T, minIdle time.Duration, wantStream, wantGroup string) broker.ReapResult {
	t.Helper()
	beforeMain := s.streamIDs(t, s.stream(key))
	beforeBF := s.streamIDs(t, s.backfill(key))
	res, err := s.B.ReapPartition(s.Ctx, cat, key, minIdle, "")
	if err != nil {
		t.Fatalf("reap: %v", err)
	}
	if res.Reaped {
		t.Fatalf("reap deleted a partition it had to keep (want blocked by stream %q group %q)", wantStream, wantGroup)
	}
	if res.Reason == "" {
		t.Fatalf("refused reap gives no reason: %+v", res)
	}
	if wantStream != "" && res.Stream != wantStream {
		t.Fatalf("reap blocked on stream %q, want %q (%s)", res.Stream, wantStream, res.Reason)
	}
	if res.Group != wantGroup {
		t.Fatalf("reap blocked by group %q, want %q (%s)", res.Group, wantGroup, res.Reason)
	}
	if !slices.Contains(s.keys(t), key) {
		t.Fatal("refused reap removed the key from the index")
	}
	if !slices.Equal(s.streamIDs(t, s.stream(key)), beforeMain) || !slices.Equal(s.streamIDs(t, s.backfill(key)), beforeBF) {
		t.Fatal("refused reap changed a lane")
	}
	return res
}

var reapCases = []Case{
	{"ReapRemovesColdPartition", func(t *testing.T, s *Suite) {
		s.coldPartition(t, key)
		res, err := s.B.ReapPartition(s.Ctx, cat, key, 0, "")
		if err != nil || !res.Reaped {
			t.Fatalf("reap of a cold partition = %+v, %v", res, err)
		}
		if ks := s.keys(t); len(ks) != 0 {
			t.Fatalf("index after reap = %v", ks)
		}
		for _, st := range []string{s.stream(key), s.backfill(key)} {
			if s.exists(t, st) {
				t.Fatalf("%s survived the reap", st)
			}
		}
		if !s.exists(t, s.L.GenerationKey(group, key)) {
			t.Fatal("reap deleted the generation counter")
		}
	}},
	{"ReapBlockedByPendingEntry", func(t *testing.T, s *Suite) {
		s.coldPartition(t, key)
		s.publish(t, key, "", 1)
		l := s.acquire(t, key, owner, long)
		s.read(t, l.Fence, s.stream(key), 10, broker.ReadNew) // delivered, not acked
		res := s.wantKept(t, 0, s.stream(key), group)
		if !strings.Contains(res.Reason, "pending") {
			t.Fatalf("reason %q does not mention pending", res.Reason)
		}
	}},
	{"ReapBlockedByGroupBehindWithNothingPending", func(t *testing.T, s *Suite) {
		s.coldPartition(t, key)
		s.publish(t, key, "", 2) // the group has zero pending but is behind
		s.wantKept(t, 0, s.stream(key), group)
	}},
	{"ReapBlockedByRegisteredGroupThatNeverRead", func(t *testing.T, s *Suite) {
		s.coldPartition(t, key)
		if err := s.B.RegisterGroup(s.Ctx, cat, "late.Group"); err != nil {
			t.Fatal(err)
		}
		s.wantKept(t, 0, "", "late.Group")
	}},
	{"ReapBlockedByUnregisteredGroupBehind", func(t *testing.T, s *Suite) {
		s.coldPartition(t, key)
		if err := s.faults.CreateGroup(s.Ctx, s.stream(key), "outside", "0"); err != nil {
			t.Fatal(err)
		}
		s.wantKept(t, 0, s.stream(key), "outside")
	}},
	{"ReapBlockedByStreamWithoutGroup", func(t *testing.T, s *Suite) {
		s.publish(t, key, "", 2)
		s.wantKept(t, 0, s.stream(key), "")
	}},
	{"ReapBlockedByMinIdle", func(t *testing.T, s *Suite) {
		s.coldPartition(t, key)
		s.wantKept(t, time.Hour, "", "")
		s.Advance(150 * time.Millisecond)
		res, err := s.B.ReapPartition(s.Ctx, cat, key, 100*time.Millisecond, "")
		if err != nil || !res.Reaped {
			t.Fatalf("reap once idle long enough = %+v, %v", res, err)
		}
	}},
	{"ReapIsLaneAware", func(t *testing.T, s *Suite) {
		s.coldPartition(t, key)
		s.publish(t, key, broker.DefaultBackfillSuffix, 1) // unread on the backfill lane only
		s.wantKept(t, 0, s.backfill(key), group)
	}},
	{"ReapUsesTheGivenBackfillSuffix", func(t *testing.T, s *Suite) {
		s.coldPartition(t, key)
		lane := s.L.LaneStream(cat, key, "slow")
		if _, err := s.B.PublishPartitioned(s.Ctx, cat, key, "slow", payload(key, 9)); err != nil {
			t.Fatal(err)
		}
		res, err := s.B.ReapPartition(s.Ctx, cat, key, 0, "slow")
		if err != nil || res.Reaped || res.Stream != lane {
			t.Fatalf("reap with suffix slow and an unread slow lane = %+v, %v; want blocked on %s", res, err, lane)
		}
	}},
	{"ReapOfPartitionWithoutStreamsCleansIndex", func(t *testing.T, s *Suite) {
		if err := s.B.RecordPartition(s.Ctx, cat, key); err != nil {
			t.Fatal(err)
		}
		res, err := s.B.ReapPartition(s.Ctx, cat, key, 0, "")
		if err != nil || !res.Reaped {
			t.Fatalf("reap of an index entry without streams = %+v, %v", res, err)
		}
		if ks := s.keys(t); len(ks) != 0 {
			t.Fatalf("index = %v", ks)
		}
	}},
	{"PublishAfterReapRecordsKeyAgain", func(t *testing.T, s *Suite) {
		s.coldPartition(t, key)
		if res, _ := s.B.ReapPartition(s.Ctx, cat, key, 0, ""); !res.Reaped {
			t.Fatal("reap refused")
		}
		s.publish(t, key, "", 1)
		if ks := s.keys(t); !slices.Equal(ks, []string{key}) {
			t.Fatalf("index after publish following a reap = %v", ks)
		}
		l := s.acquire(t, key, owner, long)
		if got := s.drain(t, l.Fence, s.stream(key)); len(got) != 1 {
			t.Fatalf("after reap and publish the group read %d entries, want 1", len(got))
		}
	}},
}
