package testenv

import (
	"math/rand/v2"
	"slices"
	"sort"
	"time"
)

// The pieces of a randomized schedule shared by the tests that try to
// strand an entry (issue 17): faults at drawn times, appends at drawn gaps,
// and for each key the time its appends stop. Every draw comes from the
// caller's seeded source, so the seed gives the schedule back. Times are
// durations on the caller's clock (real or a synctest bubble's).

// Schedule runs actions at given times, in order, on the goroutine that
// calls Run; an action may add more (a stopped node's continue).
type Schedule struct {
	items []scheduled
}

type scheduled struct {
	at time.Duration
	fn func()
}

// At runs fn at at (on Run's clock).
func (s *Schedule) At(at time.Duration, fn func()) {
	s.items = append(s.items, scheduled{at, fn})
}

// Run runs every action at its time, sleeping in between, until none is
// left; now reads the clock the times are on.
func (s *Schedule) Run(now func() time.Duration) {
	for len(s.items) > 0 {
		sort.SliceStable(s.items, func(i, j int) bool { return s.items[i].at < s.items[j].at })
		next := s.items[0]
		s.items = s.items[1:]
		time.Sleep(max(0, next.at-now()))
		next.fn()
	}
}

// AppendGap draws the gap before a key's next append, around a node's
// idle release (idleAfter): a burst, a gap shorter than idleAfter, one
// about as long, or a long one, in equal shares.
func AppendGap(rng *rand.Rand, idleAfter time.Duration) time.Duration {
	switch rng.IntN(4) {
	case 0:
		return time.Duration(rng.IntN(3000)) * time.Microsecond
	case 1:
		return time.Duration(rng.Int64N(int64(idleAfter))) + time.Microsecond
	case 2:
		return idleAfter*3/4 + time.Duration(rng.Int64N(int64(idleAfter/2)+1))
	default:
		return time.Duration(500+rng.IntN(1500)) * time.Millisecond
	}
}

// LastAppends draws when each key's appends stop, within [from,
// from+span]. A key's last entry is the one a fault can strand (a later
// entry rescues it: a wait finds the later one and the read gets both),
// so two keys in three stop from a little before a fault to four seconds
// after it (a takeover, a pause, right after a continue), the others
// anywhere in the second three quarters of the span.
func LastAppends(rng *rand.Rand, keys []string, faults []time.Duration, from, span time.Duration) map[string]time.Duration {
	until := make(map[string]time.Duration, len(keys))
	for _, k := range keys {
		at := from + span/4 + time.Duration(rng.Int64N(int64(span*3/4)))
		if len(faults) > 0 && rng.IntN(3) > 0 {
			at = faults[rng.IntN(len(faults))] - 300*time.Millisecond + time.Duration(rng.Int64N(int64(4300*time.Millisecond)))
		}
		until[k] = min(at, from+span)
	}
	return until
}

// AppendEach appends to keys, one at a time, each after a gap drawn by gap
// and until its time in until (on now's clock), or until stop is closed.
// One caller per key keeps the key's entries in order.
func AppendEach(keys []string, until map[string]time.Duration, now func() time.Duration, gap func() time.Duration,
	stop <-chan struct{}, appendKey func(key string) error) error {
	due := make(map[string]time.Duration, len(keys))
	for _, k := range keys {
		due[k] = now() + gap()
	}
	for len(due) > 0 {
		var k string
		for o, at := range due {
			if k == "" || at < due[k] || (at == due[k] && o < k) {
				k = o
			}
		}
		t := time.NewTimer(max(0, due[k]-now()))
		select {
		case <-stop:
			t.Stop()
			return nil
		case <-t.C:
		}
		if now() > until[k] {
			delete(due, k)
			continue
		}
		due[k] = now() + gap()
		if err := appendKey(k); err != nil {
			return err
		}
	}
	return nil
}

// PickNode draws one of the nodes a fault may hit (their ids, in any
// order), or none when fewer than two are left: a fault keeps one node
// running, since the tests are about handovers, not about a service with
// no node.
func PickNode(rng *rand.Rand, ids []string) (string, bool) {
	if len(ids) < 2 {
		return "", false
	}
	ids = slices.Sorted(slices.Values(ids))
	return ids[rng.IntN(len(ids))], true
}
