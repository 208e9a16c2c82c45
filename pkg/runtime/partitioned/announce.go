package partitioned

import (
	"context"
	"sync"
	"time"

	"github.com/protctl/protctl/pkg/runtime/clock"
)

// Announced wake-ups (docs/decisions/0049-announced-wake-ups.md).
//
// While every category's appends are announced (AppendWatcher: the Redis
// adapter's client tracking of the category's prefix), each append names
// its stream, and appendLoop wakes the stream's partition at once, watched
// or active. A blocking wait over the watched streams then wakes nothing
// the announcement did not, yet a flow makes it return, and costs a
// re-issue over every stream of its shard, at every entry: 85µs of the
// server's time per event at 5,000 events/s over 1,000 idle keys, half of
// what the server spent, more than the plain XREADGROUP loop's whole
// cost (BenchmarkLatencyRedis, docs/benchmarks.md). So the wait loops
// stand down while announcements are live, and check instead (a
// non-blocking read, broker.EntryChecker):
//
//   - the whole watched set once when announcements become live: entries
//     appended before the watch was established were not announced;
//   - each partition that joins the set, within announcedCheckGap: its
//     last read may predate the watch (a worker draining while the watch
//     was being established);
//   - the whole set every max(WaitTimeout, 1ms x streams), a safety net
//     that bounds what an announcement lost without its watch ending
//     could cost; in the cluster layout every max(1s, 1ms x streams),
//     the cadence of the adapter's poll there before announcements:
//     a master added after the watch began is announced by nobody, and
//     its partitions' entries wait no longer than they did then.
//
// A drained partition whose worker holds its lease stays out of the set
// while the announcements are in the state the worker took before it
// last looked at its lanes, and joins it at least every WaitTimeout
// (watchDrained, drain.go): the join's check gives it the safety net's
// bound.
//
// When a watch ends (a lost connection, a name dropped, a failed index
// check) the loops issue blocking waits again, from the ids each stream is
// watched from: whatever was appended meanwhile has a greater id, and the
// first wait returns it at once.

// announceState says whether every category's append watch is
// established.
type announceState struct {
	mu      sync.Mutex
	live    map[string]bool
	n       int           // categories
	changed chan struct{} // closed (and replaced) at every change
}

func newAnnounceState(categories []string) *announceState {
	return &announceState{live: make(map[string]bool, len(categories)), n: len(categories), changed: make(chan struct{})}
}

// set records whether category's watch is established.
func (a *announceState) set(category string, live bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.live[category] == live {
		return
	}
	if live {
		a.live[category] = true
	} else {
		delete(a.live, category)
	}
	close(a.changed)
	a.changed = make(chan struct{})
}

// state says whether every category's appends are announced, and returns
// the channel closed at the next change. A nil state (a broker that
// announces nothing) is never live.
func (a *announceState) state() (bool, <-chan struct{}) {
	if a == nil {
		return false, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.live) == a.n, a.changed
}

// announcedCover is the channel of the announcements' current state while
// every append to the node's categories is announced to it, nil
// otherwise: a worker that takes it before a point in time and finds the
// same channel later knows that every append in between was announced
// (the channel is replaced at every change), and so woke it. A Redis
// Cluster's announcements miss the masters added after they began
// (checkEvery), so they cover nothing there.
func (p *Subscription) announcedCover() <-chan struct{} {
	if p.layout.IsCluster() {
		return nil
	}
	live, ch := p.announced.state()
	if !live {
		return nil
	}
	return ch
}

const (
	// announcedCheckGap spaces the checks of partitions that joined the
	// watched set: under a flow, partitions drain and join it at every
	// entry, and a check only covers the moments around a watch's start,
	// so checks are batched rather than run per partition (at most 100 a
	// second).
	announcedCheckGap = 10 * time.Millisecond
	// announcedCheckPerStream spaces the safety-net checks of the whole
	// set beyond WaitTimeout for large sets: a check costs the server a
	// lookup per stream, and on a Redis Cluster a read per slot (the same
	// spacing as the adapter's poll there).
	announcedCheckPerStream = time.Millisecond
	// announcedClusterCheck is the safety net's shortest period in the
	// cluster layout (see checkEvery).
	announcedClusterCheck = time.Second
)

// checkLoop is waitLoop while every category's appends are announced: it
// checks ws's streams instead of waiting on them, until the announcements
// change (changed closed) or ctx ends. failed: a check failed; the caller
// backs off and comes back, with a check of the whole set.
func (p *Subscription) checkLoop(ctx context.Context, ws *watchSet, changed <-chan struct{}) (failed bool) {
	var (
		full, gap     clock.Timer
		fullC, gapC   <-chan time.Time
		added         <-chan struct{}
		checked       uint64 // the epoch the set is checked up to
		lastFreshTime time.Time
	)
	defer func() {
		for _, t := range []clock.Timer{full, gap} {
			if t != nil {
				t.Stop()
			}
		}
	}()
	checkAll := func() bool {
		var base map[string]string
		base, checked, added = ws.snapshot()
		if p.checkEntries(ctx, ws, base) {
			return true
		}
		if full != nil {
			full.Stop()
		}
		full = p.clk.NewTimer(p.checkEvery(len(base)))
		fullC = full.C()
		return false
	}
	checkFresh := func() bool {
		var fresh map[string]string
		fresh, checked, added = ws.since(checked)
		lastFreshTime = p.clk.Now()
		return p.checkEntries(ctx, ws, fresh)
	}
	if checkAll() {
		return true
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-changed:
			return false
		case <-fullC:
			if checkAll() {
				return true
			}
		case <-added:
			added = nil
			if gapC != nil {
				continue // a check is due already
			}
			if wait := lastFreshTime.Add(max(p.cfg.WaitRestart, announcedCheckGap)).Sub(p.clk.Now()); wait > 0 {
				gap = p.clk.NewTimer(wait)
				gapC = gap.C()
				continue
			}
			if checkFresh() {
				return true
			}
		case <-gapC:
			gap, gapC = nil, nil
			if checkFresh() {
				return true
			}
		}
	}
}

// checkEvery is the safety net's period for a watched set of n streams.
func (p *Subscription) checkEvery(n int) time.Duration {
	floor := p.cfg.WaitTimeout
	if p.layout.IsCluster() {
		floor = min(floor, announcedClusterCheck)
	}
	return max(floor, time.Duration(n)*announcedCheckPerStream)
}

// checkEntries checks from's streams for entries at once and hands the
// partitions that have some to the coordinator, as a wait's return does.
func (p *Subscription) checkEntries(ctx context.Context, ws *watchSet, from map[string]string) (failed bool) {
	if len(from) == 0 {
		return false
	}
	streams, err := p.checker.EntriesAfter(ctx, from)
	return p.reportWait(ctx, ws, waitDone{from: from, streams: streams, err: err, stopped: ctx.Err() != nil})
}
