package runtime

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/protctl/protctl/pkg/runtime/clock"
)

// watchSet is the set of streams the node waits on: every lane of every
// partition that is assigned to the node and drained, whether it still
// holds its lease (for IdleAfter) or not. It maps each stream to the id
// after which an entry is news. Workers add their partition when it
// drains and remove it when it reads again; the coordinator removes
// partitions it activates or gives away, and the wait loop removes those
// a wait found entries on (fired) before it reports them. The wait loop
// snapshots it.
type watchSet struct {
	mu      sync.Mutex
	after   map[string]string // stream -> last id known delivered
	keyOf   map[string]string // stream -> partition key
	stamp   map[string]uint64 // stream -> the epoch it was (re)added at
	streams map[string][]string
	epoch   uint64        // counts additions
	added   chan struct{} // closed (and replaced) when streams are added
}

func newWatchSet() *watchSet {
	return &watchSet{
		after:   make(map[string]string),
		keyOf:   make(map[string]string),
		stamp:   make(map[string]uint64),
		streams: make(map[string][]string),
		added:   make(chan struct{}),
	}
}

// add watches key's streams from the given ids (replacing earlier ids).
func (s *watchSet) add(key string, after map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sameLocked(key, after) {
		return // already watched from these ids: no need to restart a wait
	}
	s.removeLocked(key)
	s.epoch++
	streams := make([]string, 0, len(after))
	for stream, id := range after {
		s.after[stream] = id
		s.keyOf[stream] = key
		s.stamp[stream] = s.epoch
		streams = append(streams, stream)
	}
	s.streams[key] = streams
	close(s.added)
	s.added = make(chan struct{})
}

func (s *watchSet) sameLocked(key string, after map[string]string) bool {
	streams, ok := s.streams[key]
	if !ok || len(streams) != len(after) {
		return false
	}
	for _, st := range streams {
		if id, ok := after[st]; !ok || s.after[st] != id {
			return false
		}
	}
	return true
}

func (s *watchSet) remove(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeLocked(key)
}

func (s *watchSet) removeLocked(key string) {
	for _, stream := range s.streams[key] {
		delete(s.after, stream)
		delete(s.keyOf, stream)
		delete(s.stamp, stream)
	}
	delete(s.streams, key)
}

// snapshot returns a copy of the stream ids, the epoch they are as of,
// and the channel closed at the next addition.
func (s *watchSet) snapshot() (map[string]string, uint64, <-chan struct{}) {
	return s.since(0)
}

// since is snapshot restricted to the streams (re)added after epoch.
func (s *watchSet) since(epoch uint64) (map[string]string, uint64, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string)
	for k, v := range s.after {
		if s.stamp[k] > epoch {
			out[k] = v
		}
	}
	return out, s.epoch, s.added
}

// fired takes the partitions of streams that a wait from the ids in from
// found entries on: it removes them from the set (their workers read
// them now and add them again when they drain) and returns their keys.
// Streams no longer watched, or watched again from other ids than the
// wait's (a later wait covers them), are stale and skipped.
func (s *watchSet) fired(streams []string, from map[string]string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[string]bool, len(streams))
	var out []string
	for _, st := range streams {
		k, ok := s.keyOf[st]
		if !ok || seen[k] || s.after[st] != from[st] {
			continue
		}
		seen[k] = true
		out = append(out, k)
	}
	for _, k := range out {
		s.removeLocked(k)
	}
	return out
}

func (s *watchSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams)
}

// waitLoop waits on every watched stream with the broker's EntryWaiter
// and tells the coordinator which partitions got entries. It waits in two
// tiers, so that a partition that drains is watched within about a round
// trip without a wait being issued again over every idle partition:
//
//   - the base wait names every stream watched when it was issued. It is
//     issued again, with everything watched by then, as soon as it
//     returns (as a plain XREADGROUP BLOCK loop is), so under a steady
//     flow each re-issue takes in what drained meanwhile;
//   - the fresh wait, beside it, names only the streams (re)added since
//     the base wait was issued. Additions restart it, at most once per
//     max(WaitRestart, 10µs x its streams), and at most about 125 times
//     a second while partitions keep draining (waitRestartStreams): the
//     server's work for a restart is in proportion to what changed, not
//     to the whole set.
//
// When the fresh wait would name more than a quarter of the base's
// streams (and more than 64), the base wait is restarted to take them in
// instead. Streams a wait found entries on leave the set before they are
// reported (watchSet.fired), so the wait issued right after does not find
// the same entries again; their partitions come back when they drain.
//
// Issuing a blocking wait costs the server work in proportion to the
// streams it names (each is looked up and registered, then unregistered:
// 1-5µs a stream). While nothing changes the loop costs one blocking call
// per WaitTimeout (two while partitions drained since the base wait);
// entries cost a re-issue of the wait that found them, as they cost a
// plain consumer's loop.
//
// On a Redis Cluster one blocking read cannot name streams of different
// slots, and every partition has a slot of its own in the cluster
// layout, so the Redis broker's wait polls there: one non-blocking read
// per partition every max(1 s, 100µs x streams), pipelined per master
// (TestClusterIdlePartitionsWakeOnEveryMaster). Entries announced by a
// wake-up signal are still noticed at once; the poll is the safety net
// for the others.
func (p *Partitioned) waitLoop(ctx context.Context) {
	defer p.wg.Done()
	backoff := newBackoff(100*time.Millisecond, p.cfg.WaitTimeout, p.jit)
	// budget spaces the base wait's issues, restarts the fresh wait's
	// restarts for additions (a re-issue after a return is not counted:
	// entries pay for it).
	var budget, restarts waitBudget
	for ctx.Err() == nil {
		base, epoch, added := p.watch.snapshot()
		if len(base) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-added:
				continue
			}
		}
		if d := budget.spend(p.clk.Now(), len(base)); d > 0 {
			if !p.sleep(ctx, d) {
				return
			}
			if base, epoch, added = p.watch.snapshot(); len(base) == 0 {
				continue
			}
		}
		if failed := p.waitTiers(ctx, base, epoch, added, &restarts); failed {
			if !p.sleep(ctx, backoff.next()) {
				return
			}
			continue
		}
		backoff.reset()
	}
}

// waitBudget bounds the server time the base wait's issues take under a
// steady flow, when it returns at every entry: an issue over n streams is
// counted as n x waitIssueCost (about 4 times what it costs the server,
// 1-2µs a stream), and issues wait while the count runs ahead of the
// clock by more than waitBurst. That keeps issuing under about a quarter
// of a Redis core, and costs no delay at all while entries are sparse.
type waitBudget struct{ at time.Time }

const (
	waitIssueCost = 8 * time.Microsecond
	waitBurst     = 20 * time.Millisecond
)

// spend counts an issue over n streams at now and returns how long to
// wait before it.
func (b *waitBudget) spend(now time.Time, n int) time.Duration {
	if floor := now.Add(-waitBurst); b.at.Before(floor) {
		b.at = floor
	}
	b.at = b.at.Add(time.Duration(n) * waitIssueCost)
	return max(0, b.at.Sub(now))
}

// due is how long an issue would wait now, without counting it.
func (b *waitBudget) due(now time.Time) time.Duration {
	return max(0, b.at.Sub(now))
}

// waitRestartStreams is what a restart of the fresh wait counts besides
// its streams, for the round trip that interrupts the running wait and
// the new wait's call: as much as 1,000 streams (8ms), so that restarts
// for additions run at most about 125 a second while partitions keep
// draining (a bulk drain) and at once while they are rare.
const waitRestartStreams = 1000

// waitDone is the end of one wait: the ids it waited from, the streams it
// found entries on, and whether the loop stopped it (a restart).
type waitDone struct {
	from    map[string]string
	streams []string
	err     error
	stopped bool
}

// pendingWait is a wait running on its own goroutine.
type pendingWait struct {
	done   chan waitDone
	cancel context.CancelFunc
}

func (p *Partitioned) startWait(ctx context.Context, from map[string]string) *pendingWait {
	wctx, cancel := context.WithCancel(ctx)
	w := &pendingWait{done: make(chan waitDone, 1), cancel: cancel}
	go func() {
		streams, err := p.waiter.WaitForEntries(wctx, from, p.cfg.WaitTimeout)
		w.done <- waitDone{from: from, streams: streams, err: err, stopped: wctx.Err() != nil}
	}()
	return w
}

// finish stops w and returns its end.
func (w *pendingWait) finish() waitDone {
	w.cancel()
	return <-w.done
}

// reportWait hands the partitions a wait found entries on to the
// coordinator; failed says the wait failed (not stopped by the loop).
func (p *Partitioned) reportWait(ctx context.Context, d waitDone) (failed bool) {
	if ctx.Err() != nil {
		return false
	}
	if d.err != nil && !d.stopped {
		p.log.Warn("waiting for entries failed", "subscription", p.cfg.Name, "streams", len(d.from), "err", d.err)
		p.obs.error(ErrorEvent{Subscription: p.cfg.Name, Op: "wait", Err: d.err})
		return true
	}
	if keys := p.watch.fired(d.streams, d.from); len(keys) > 0 {
		p.send(evWake{keys: keys})
	}
	return false
}

// waitTiers runs one base wait on base (the watch set as of epoch), and
// fresh waits beside it on what is added after, until the base wait
// returns or must take the fresh streams in. failed: a wait failed.
func (p *Partitioned) waitTiers(ctx context.Context, base map[string]string, epoch uint64, added <-chan struct{}, restarts *waitBudget) (failed bool) {
	bw := p.startWait(ctx, base)
	var (
		fw        *pendingWait
		freshN    int
		lastFresh time.Time
		timer     clock.Timer
		timerC    <-chan time.Time
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	stopFresh := func() {
		if fw != nil {
			failed = p.reportWait(ctx, fw.finish()) || failed
			fw = nil
		}
	}
	for {
		var freshDone chan waitDone
		if fw != nil {
			freshDone = fw.done
		}
		restart, restartedByAddition := false, false
		select {
		case <-ctx.Done():
			bw.finish()
			stopFresh()
			return false
		case d := <-bw.done:
			stopFresh()
			return p.reportWait(ctx, d) || failed
		case d := <-freshDone:
			fw = nil
			if p.reportWait(ctx, d) {
				p.reportWait(ctx, bw.finish())
				return true
			}
			restart = true // on what is still fresh
		case <-added:
			added = nil
			now := p.clk.Now()
			gap := max(p.cfg.WaitRestart, time.Duration(freshN)*10*time.Microsecond)
			wait := max(lastFresh.Add(gap).Sub(now), restarts.due(now))
			if wait <= 0 {
				restart, restartedByAddition = true, true
			} else if timerC == nil {
				timer = p.clk.NewTimer(wait)
				timerC = timer.C()
			}
		case <-timerC:
			timer, timerC = nil, nil
			restart, restartedByAddition = true, true
		}
		if !restart {
			continue
		}
		stopFresh()
		if failed {
			p.reportWait(ctx, bw.finish())
			return true
		}
		var fresh map[string]string
		fresh, _, added = p.watch.since(epoch)
		for st, id := range fresh {
			if base[st] == id {
				delete(fresh, st) // the base wait covers it as it is
			}
		}
		if len(fresh) > 64 && len(fresh) > len(base)/4 {
			return p.reportWait(ctx, bw.finish())
		}
		freshN = len(fresh)
		if freshN > 0 {
			lastFresh = p.clk.Now()
			if restartedByAddition {
				restarts.spend(lastFresh, freshN+waitRestartStreams)
			}
			fw = p.startWait(ctx, fresh)
		}
	}
}

// discoverLoop scans the categories' indexes at start and every
// DiscoverEvery for partition keys the subscription does not know yet.
func (p *Partitioned) discoverLoop(ctx context.Context) {
	defer p.wg.Done()
	const page = 1000
	backoff := newBackoff(time.Second, min(p.cfg.DiscoverEvery, 5*time.Second), p.jit)
	for {
		started := p.clk.Now()
		keys := make(map[string]struct{})
		var scanErr error
		for _, cat := range p.cfg.Categories {
			var cursor uint64
			for {
				page, next, err := p.cfg.Broker.ScanPartitionKeys(ctx, cat, cursor, page)
				if err != nil {
					scanErr = err
					break
				}
				for _, k := range page {
					keys[k] = struct{}{}
				}
				if next == 0 {
					break
				}
				cursor = next
			}
			if scanErr != nil {
				break
			}
		}
		if ctx.Err() != nil {
			return
		}
		wait := p.cfg.DiscoverEvery
		if scanErr != nil {
			p.log.Warn("partition discovery failed", "subscription", p.cfg.Name, "err", scanErr)
			p.obs.error(ErrorEvent{Subscription: p.cfg.Name, Op: "discover", Err: scanErr})
			wait = backoff.next()
		} else {
			backoff.reset()
		}
		if len(keys) > 0 || scanErr == nil {
			p.send(evDiscovered{keys: keysOf(keys), complete: scanErr == nil, started: started})
		}
		if scanErr == nil {
			p.lastScanned.Store(int64(len(keys)))
		}
		t := p.clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-p.rediscover:
			t.Stop()
			// A scan brought forward (a changed index, a new watch) waits
			// for the last one to be rescanGap old: a scan costs the
			// server in proportion to the index.
			if d := started.Add(rescanGap(p.lastScanned.Load())).Sub(p.clk.Now()); d > 0 && !p.sleep(ctx, d) {
				return
			}
		}
	}
}

// signalLoop forwards the wake-up signals of category's publishes to the
// coordinator, batching those already queued. Each time the watch is
// established (at start, and again after a lost connection) signals may
// have been missed: it asks for a discovery scan at once, which finds new
// keys, and for a resync, which re-reads idle partitions when there is no
// blocking wait to notice their entries.
func (p *Partitioned) signalLoop(ctx context.Context, category string) {
	defer p.wg.Done()
	backoff := newBackoff(100*time.Millisecond, 5*time.Second, p.jit)
	first := true
	for ctx.Err() == nil {
		ch, err := p.pwatch.WatchPartitions(ctx, category)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.obs.error(ErrorEvent{Subscription: p.cfg.Name, Op: "watch partitions", Err: err})
			if !p.sleep(ctx, backoff.next()) {
				return
			}
			continue
		}
		backoff.reset()
		select {
		case p.rediscover <- struct{}{}:
		default:
		}
		if !first {
			p.send(evResync{})
		}
		first = false
		for key := range ch {
			keys := []string{key}
		drain:
			for len(keys) < 1024 {
				select {
				case k, ok := <-ch:
					if !ok {
						break drain
					}
					keys = append(keys, k)
				default:
					break drain
				}
			}
			p.send(evSignal{keys: keys})
		}
	}
}

// ledgerLoop follows operator requests: signals from WatchRequests, and
// a re-read of the subscription's parked entries every LedgerPollEvery
// (signals are hints; the re-read also makes requests survive restarts
// and reach a partition's new owner).
func (p *Partitioned) ledgerLoop(ctx context.Context) {
	defer p.wg.Done()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		backoff := newBackoff(time.Second, p.cfg.LedgerPollEvery, p.jit)
		for ctx.Err() == nil {
			ch, err := p.cfg.Ledger.WatchRequests(ctx, p.cfg.Name)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				p.obs.error(ErrorEvent{Subscription: p.cfg.Name, Op: "watch requests", Err: err})
				if !p.sleep(ctx, backoff.next()) {
					return
				}
				continue
			}
			backoff.reset()
			for key := range ch {
				p.send(evLedgerSignal{key: key})
			}
		}
	}()
	backoff := newBackoff(time.Second, p.cfg.LedgerPollEvery, p.jit)
	for {
		started := p.ledgerReads.Add(1)
		entries, err := p.cfg.Ledger.ListParked(ctx, p.cfg.Name)
		if ctx.Err() != nil {
			return
		}
		wait := p.cfg.LedgerPollEvery
		if err != nil {
			p.log.Warn("reading the failure ledger failed", "subscription", p.cfg.Name, "err", err)
			p.obs.error(ErrorEvent{Subscription: p.cfg.Name, Op: "list parked", Err: err})
			wait = backoff.next()
		} else {
			backoff.reset()
			p.send(evLedgerList{entries: entries, started: started})
		}
		if !p.sleep(ctx, wait) {
			return
		}
	}
}

// sleep waits d on the subscription's clock; false when ctx ended first.
func (p *Partitioned) sleep(ctx context.Context, d time.Duration) bool {
	t := p.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

var errStopped = errors.New("runtime: subscription stopping")
