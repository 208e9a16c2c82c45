package testenv

import (
	"slices"
	"sort"
	"testing"
	"time"
)

// HandlerCall is one handler call as a test recorded it, for CheckCalls.
type HandlerCall struct {
	Node string
	Key  string
	// Seq is the entry's place in its key's stream, in stream-id order,
	// from 1.
	Seq     int
	Gen     int64 // the lease generation the call ran under
	Attempt int   // 1 for the first delivery
	// Begin and End are read from one monotonic clock shared by every
	// node (the test's); End is 0 while the call runs.
	Begin, End time.Duration
}

// CallRules are what CheckCalls allows besides handling each key's
// entries once, in order.
type CallRules struct {
	// MaxInFlight is the longest tail a newer generation may replay: the
	// entries an earlier owner read in one batch and did not get to
	// acknowledge.
	MaxInFlight int
	// Exempt, when set, leaves a call out of every check (the caller
	// says why, e.g. in a log line): earlier are the key's calls that
	// began before it.
	Exempt func(c HandlerCall, earlier []HandlerCall) bool
}

// CallStats sums up a record CheckCalls accepted.
type CallStats struct {
	Calls   int      // calls in the record
	Replays int      // calls that stepped back to an entry handled before
	Exempt  int      // calls Exempt left out
	Failed  []string // the keys whose calls broke a rule, sorted
}

// CheckCalls fails t for every call that breaks the runtime's promises to
// a handler, per key: no two calls overlap in time (whatever their nodes);
// no call runs under a generation older than one that already began (a
// stale owner); calls go in stream order, where the only steps back are a
// newer generation replaying the unacknowledged tail (at most MaxInFlight
// entries behind the furthest entry begun) and then going on in order,
// and a retry of the same entry by the same generation (a later attempt).
// Completeness (every entry handled) is the caller's check.
func CheckCalls(t testing.TB, calls []HandlerCall, rules CallRules) CallStats {
	t.Helper()
	st := CallStats{Calls: len(calls)}
	byKey := map[string][]HandlerCall{}
	for _, c := range calls {
		byKey[c.Key] = append(byKey[c.Key], c)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	errs := 0
	var key string
	fail := func(format string, a ...any) {
		t.Helper()
		if errs < 30 {
			t.Errorf(format, a...)
		}
		errs++
		if n := len(st.Failed); n == 0 || st.Failed[n-1] != key {
			st.Failed = append(st.Failed, key)
		}
	}
	for _, key = range keys {
		cs := byKey[key]
		sort.SliceStable(cs, func(i, j int) bool { return cs[i].Begin < cs[j].Begin })
		var (
			last, frontier  = 0, 0 // seqs: the previous call's, the furthest begun
			lastGen, maxGen int64
			open            []HandlerCall
		)
		for i, c := range cs {
			if rules.Exempt != nil && rules.Exempt(c, cs[:i]) {
				st.Exempt++
				continue
			}
			open = slices.DeleteFunc(open, func(o HandlerCall) bool { return o.End != 0 && o.End <= c.Begin })
			for _, o := range open {
				fail("key %s: %s began seq %d (generation %d) at %s while %s was inside seq %d (generation %d) [%s, %s]",
					key, c.Node, c.Seq, c.Gen, c.Begin, o.Node, o.Seq, o.Gen, o.Begin, o.End)
			}
			open = append(open, c)
			if c.Gen < maxGen {
				fail("key %s: %s began seq %d under generation %d after generation %d had begun (a stale owner)",
					key, c.Node, c.Seq, c.Gen, maxGen)
			}
			switch {
			case c.Seq == last+1 && c.Seq <= frontier+1:
			case c.Seq <= last && c.Gen > lastGen && frontier-c.Seq < rules.MaxInFlight:
				st.Replays++
			case c.Seq == last && c.Gen == lastGen && c.Attempt > 1:
			default:
				fail("key %s: %s began seq %d (generation %d, attempt %d) after seq %d (generation %d), furthest begun %d: out of order",
					key, c.Node, c.Seq, c.Gen, c.Attempt, last, lastGen, frontier)
			}
			last, lastGen = c.Seq, c.Gen
			frontier = max(frontier, c.Seq)
			maxGen = max(maxGen, c.Gen)
		}
	}
	if errs > 30 {
		t.Errorf("... %d failures in all", errs)
	}
	return st
}
