package brokertest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// waitRead runs wr's call on its own goroutine and returns its answer
// on a channel.
func (s *Suite) waitRead(ctx context.Context, wr broker.WaitReader, stop <-chan struct{}, after map[string]string, block time.Duration, reads []broker.FencedRead) <-chan waitAnswer {
	ch := make(chan waitAnswer, 1)
	go func() {
		res, ok := wr.WaitAndReadPartitionsFenced(ctx, stop, after, block, reads)
		ch <- waitAnswer{res, ok}
	}()
	return ch
}

// waitReader returns s's broker as a WaitReader that can wait here, or
// skips t: a probe with nothing to read must run (a Redis Cluster's
// adapter cannot wait this way, and says so with ok false).
func (s *Suite) waitReader(t *testing.T) broker.WaitReader {
	t.Helper()
	wr := optional[broker.WaitReader](t, s)
	if _, ok := wr.WaitAndReadPartitionsFenced(s.Ctx, nil, map[string]string{s.stream("probe"): "0-0"}, time.Millisecond, nil); !ok {
		t.Skip("the adapter cannot wait and read here")
	}
	return wr
}

type waitAnswer struct {
	res broker.WaitedReads
	ok  bool
}

// pending sums group's pending entries on stream over its consumers.
func (s *Suite) pending(t *testing.T, stream string) int64 {
	t.Helper()
	var n int64
	for _, c := range s.consumers(t, stream) {
		n += c
	}
	return n
}

// untilPending polls stream's pending count until it is want, failing t
// when the suite's context ends first.
func (s *Suite) untilPending(t *testing.T, stream string, want int64) {
	t.Helper()
	for s.pending(t, stream) != want {
		select {
		case <-s.Ctx.Done():
			t.Fatalf("%s never had %d pending entries", stream, want)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// waitReadCases hold a WaitReader to its contract: the acks before the
// wait, the reads after it whatever ended it, each read fenced, and
// nothing sent once stopped.
var waitReadCases = []Case{
	{"WaitReadAcksFirstAndReadsTheEntryThatEndsTheWait", func(t *testing.T, s *Suite) {
		wr := s.waitReader(t)
		first := s.publish(t, key, "", 2)
		l := s.acquire(t, key, owner, long)
		s.read(t, l.Fence, s.stream(key), 10, broker.ReadNew) // both pending
		after := map[string]string{s.stream(key): first[1], s.backfill(key): "0-0"}
		read := broker.FencedRead{Fence: l.Fence, Stream: s.stream(key), Group: group, Ack: first, Count: 10, Mode: broker.ReadNew}
		ans := s.waitRead(s.Ctx, wr, nil, after, long, []broker.FencedRead{read})
		// The acks are not held back by the wait.
		s.untilPending(t, s.stream(key), 0)
		next := s.publish(t, key, "", 1)
		a := <-ans
		read.Ack = nil
		for a.ok && len(a.res.Ready) == 0 && len(a.res.Reads[0].Messages) == 0 && a.res.Reads[0].Err == nil {
			// The adapter may wait less than asked (the Redis one,
			// less than its client's ReadTimeout): wait again.
			a = <-s.waitRead(s.Ctx, wr, nil, after, long, []broker.FencedRead{read})
		}
		if !a.ok {
			t.Fatal("ok = false: nothing was sent")
		}
		if a.res.WaitErr != nil || a.res.Reads[0].Err != nil {
			t.Fatalf("wait error %v, read error %v", a.res.WaitErr, a.res.Reads[0].Err)
		}
		if len(a.res.Ready) > 0 && !slices.Equal(a.res.Ready, []string{s.stream(key)}) {
			// Empty only when the wait ended before the append, which
			// the read after it then found.
			t.Fatalf("ready = %v, want the main lane", a.res.Ready)
		}
		if got := ids(a.res.Reads[0].Messages); !slices.Equal(got, next) {
			t.Fatalf("read %v, want %v", got, next)
		}
		if n := s.pending(t, s.stream(key)); n != 1 {
			t.Fatalf("%d pending after the read, want the entry it delivered", n)
		}
	}},
	{"WaitReadStoppedRunsItsReadsOrSendsNothing", func(t *testing.T, s *Suite) {
		wr := s.waitReader(t)
		// Entries the wait does not see (they are not past its ids) but
		// the read does: what the answer says of the read is what the
		// group shows.
		for i, delay := range []time.Duration{0, time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond} {
			k := "stop-" + itoa(i)
			pub := s.publish(t, k, "", 2)
			l := s.acquire(t, k, owner, long)
			stop := make(chan struct{})
			ans := s.waitRead(s.Ctx, wr, stop, map[string]string{s.stream(k): pub[1]}, long,
				[]broker.FencedRead{{Fence: l.Fence, Stream: s.stream(k), Group: group, Count: 10, Mode: broker.ReadNew}})
			time.Sleep(delay)
			close(stop)
			a := <-ans
			if !a.ok {
				if n := s.pending(t, s.stream(k)); n != 0 {
					t.Fatalf("stopped after %s: ok = false, yet %d entries were delivered", delay, n)
				}
				if got := ids(s.read(t, l.Fence, s.stream(k), 10, broker.ReadNew)); !slices.Equal(got, pub) {
					t.Fatalf("stopped after %s: ok = false, then a read got %v, want %v", delay, got, pub)
				}
				continue
			}
			if len(a.res.Ready) != 0 || a.res.WaitErr != nil {
				t.Fatalf("stopped after %s: ready %v, wait error %v; want neither", delay, a.res.Ready, a.res.WaitErr)
			}
			if err := a.res.Reads[0].Err; err != nil {
				t.Fatalf("stopped after %s: read: %v", delay, err)
			}
			if got := ids(a.res.Reads[0].Messages); !slices.Equal(got, pub) {
				t.Fatalf("stopped after %s: read %v, want %v", delay, got, pub)
			}
			if n := s.pending(t, s.stream(k)); n != 2 {
				t.Fatalf("stopped after %s: %d pending, want the 2 the read delivered", delay, n)
			}
		}
	}},
	{"WaitReadSendsNothingOnceStoppedOrCancelled", func(t *testing.T, s *Suite) {
		wr := s.waitReader(t)
		pub := s.publish(t, key, "", 2)
		l := s.acquire(t, key, owner, long)
		read := []broker.FencedRead{{Fence: l.Fence, Stream: s.stream(key), Group: group, Count: 10, Mode: broker.ReadNew}}
		stop := make(chan struct{})
		close(stop)
		if _, ok := wr.WaitAndReadPartitionsFenced(s.Ctx, stop, map[string]string{s.stream(key): "0-0"}, long, read); ok {
			t.Fatal("stop closed before the call: ok = true")
		}
		ctx, cancel := context.WithCancel(s.Ctx)
		cancel()
		if _, ok := wr.WaitAndReadPartitionsFenced(ctx, nil, map[string]string{s.stream(key): "0-0"}, long, read); ok {
			t.Fatal("ctx ended before the call: ok = true")
		}
		if n := s.pending(t, s.stream(key)); n != 0 {
			t.Fatalf("%d entries delivered", n)
		}
		if got := ids(s.read(t, l.Fence, s.stream(key), 10, broker.ReadNew)); !slices.Equal(got, pub) {
			t.Fatalf("read %v after, want %v", got, pub)
		}
	}},
	{"WaitReadIsFencedPerRead", func(t *testing.T, s *Suite) {
		wr := s.waitReader(t)
		s.publish(t, "w-a", "", 2)
		pubB := s.publish(t, "w-b", "", 2)
		stale := s.acquire(t, "w-a", owner, 50*time.Millisecond)
		held := s.read(t, stale.Fence, s.stream("w-a"), 10, broker.ReadNew) // pending under the stale owner
		s.Advance(120 * time.Millisecond)                                   // its owner paused past the TTL
		cur := s.acquire(t, "w-a", "node-b", long)
		lb := s.acquire(t, "w-b", owner, long)
		more := s.publish(t, "w-a", "", 1)
		// The wait returns at once (entries past "0-0"); the stale read
		// and its ack change nothing, the other read is served.
		a := <-s.waitRead(s.Ctx, wr, nil, map[string]string{s.stream("w-a"): "0-0", s.stream("w-b"): "0-0"}, long,
			[]broker.FencedRead{
				{Fence: stale.Fence, Stream: s.stream("w-a"), Group: group, Ack: ids(held), Count: 10, Mode: broker.ReadNew},
				{Fence: lb.Fence, Stream: s.stream("w-b"), Group: group, Count: 10, Mode: broker.ReadNew},
			})
		if !a.ok {
			t.Fatal("ok = false")
		}
		wantLeaseLost(t, "wait and read", a.res.Reads[0].Err)
		if len(a.res.Reads[0].Messages) != 0 {
			t.Fatalf("the stale read delivered %v", ids(a.res.Reads[0].Messages))
		}
		if err := a.res.Reads[1].Err; err != nil {
			t.Fatalf("the current owner's read: %v", err)
		}
		if got := ids(a.res.Reads[1].Messages); !slices.Equal(got, pubB) {
			t.Fatalf("the current owner's read got %v, want %v", got, pubB)
		}
		if n := s.pending(t, s.stream("w-a")); n != 2 {
			t.Fatalf("w-a has %d pending, want the stale owner's 2 still pending (its ack refused)", n)
		}
		if got := ids(s.read(t, cur.Fence, s.stream("w-a"), 10, broker.ReadNew)); !slices.Equal(got, more) {
			t.Fatalf("the new owner read %v, want %v (the stale read took nothing)", got, more)
		}
	}},
	{"WaitReadRefusesBadInputChangingNothing", func(t *testing.T, s *Suite) {
		wr := s.waitReader(t)
		s.publish(t, key, "", 1)
		l := s.acquire(t, key, owner, long)
		read := []broker.FencedRead{{Fence: l.Fence, Stream: s.stream(key), Group: group, Count: 10, Mode: broker.ReadNew}}
		for name, c := range map[string]struct {
			after map[string]string
			block time.Duration
		}{
			"negative block": {map[string]string{s.stream(key): "0-0"}, -time.Second},
			"no stream":      {map[string]string{}, time.Second},
			"bad id":         {map[string]string{s.stream(key): "x"}, time.Second},
		} {
			a, ok := wr.WaitAndReadPartitionsFenced(s.Ctx, nil, c.after, c.block, read)
			if !ok {
				t.Fatalf("%s: ok = false, want the call refused with its error", name)
			}
			wantErrIs(t, name, a.WaitErr, broker.ErrInvalidArgument)
			wantErrIs(t, name+" (the read)", a.Reads[0].Err, broker.ErrInvalidArgument)
		}
		bad := []broker.FencedRead{{Fence: l.Fence, Stream: s.stream(key), Group: group, Count: 0, Mode: broker.ReadNew}}
		a, ok := wr.WaitAndReadPartitionsFenced(s.Ctx, nil, map[string]string{s.stream(key): "0-0"}, time.Second, bad)
		if !ok {
			t.Fatal("count 0: ok = false, want the read refused with its error")
		}
		wantErrIs(t, "count 0", a.Reads[0].Err, broker.ErrInvalidArgument)
		if n := s.pending(t, s.stream(key)); n != 0 {
			t.Fatalf("%d entries delivered by refused calls", n)
		}
	}},
}
