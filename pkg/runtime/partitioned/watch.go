package partitioned

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/clock"
	"github.com/protctl/protctl/pkg/runtime/internal/backoff"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
	"github.com/protctl/protctl/pkg/runtime/internal/rewatch"
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
	// log lists the additions since the last snapshot, in epoch order,
	// so that since costs what was added, not the whole set (it runs at
	// every restart of the fresh wait). An entry whose stream was removed
	// or added again since is stale: its stamp differs.
	log []watchAdd
}

type watchAdd struct {
	stream string
	epoch  uint64
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
		s.log = append(s.log, watchAdd{stream, s.epoch})
	}
	if len(s.log) > 1024 && len(s.log) > 4*len(s.after) {
		s.compactLocked()
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

// compactLocked drops the log's stale entries.
func (s *watchSet) compactLocked() {
	live := s.log[:0]
	for _, a := range s.log {
		if s.stamp[a.stream] == a.epoch {
			live = append(live, a)
		}
	}
	clear(s.log[len(live):])
	s.log = live
}

// snapshot returns a copy of the stream ids, the epoch they are as of,
// and the channel closed at the next addition. Only the set's wait loop
// calls it, and since with the epoch it returned: the log of additions
// up to it is dropped.
func (s *watchSet) snapshot() (map[string]string, uint64, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.log)
	s.log = s.log[:0]
	return maps.Clone(s.after), s.epoch, s.added
}

// since is snapshot restricted to the streams (re)added after epoch, the
// epoch of the last snapshot or later.
func (s *watchSet) since(epoch uint64) (map[string]string, uint64, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string)
	i, _ := slices.BinarySearchFunc(s.log, epoch+1, func(a watchAdd, e uint64) int { return cmp.Compare(a.epoch, e) })
	for _, a := range s.log[i:] {
		if s.stamp[a.stream] == a.epoch {
			out[a.stream] = s.after[a.stream]
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

// watchLanes splits the watched streams in two sets, each waited on by
// its own loop: the main lanes, and the backfill lanes. A flow on the
// main lanes makes the wait on them return and be issued again at every
// entry, and an issue costs the server in proportion to the streams it
// names; the backfill lanes (as many as the main ones, and almost always
// quiet) are not in it, so the main wait costs half as much, and the
// backfill wait, which their rare entries alone make return, stays
// issued. A partition's backfill lanes stay watched while it is active
// (remove leaves them): entries there wake its worker as they did, and a
// worker that drains re-adds them unchanged, which restarts nothing. Both
// waits have the two tiers of waitLoop: the backfill lanes see additions
// in bulk when many partitions drain at once (a node's start, a backlog),
// and without the fresh tier each addition restarted the wait over every
// backfill lane, up to a thousand times a second (BenchmarkRuntimeThroughput:
// the server's CPU per message rose by 80%).
//
// The main lanes are sharded by key (Config.WaitShards): a flow re-issues
// the wait of the shard its entry is in, over a shard's streams only. One
// wait over every main lane cost the server ~1.4ms per re-issue over 1,000
// streams (INFO commandstats, BenchmarkLatencyRedis idle at 500/s), 70% of
// a Redis core at 500 events/s, which every other command queued behind.
type watchLanes struct {
	main     []*watchSet
	backfill *watchSet
	// isBackfill says whether stream is a backfill lane of key.
	isBackfill func(key, stream string) bool
}

// DefaultWaitShards is Config.WaitShards' default: one wait, which a
// client's default pool (10 per CPU, half of which backlog readers may
// pin) holds beside everything else. Raise it with the pool (protctl
// run node uses 4 and sizes its pool for them).
const DefaultWaitShards = 1

func newWatchLanes(shards int, isBackfill func(key, stream string) bool) *watchLanes {
	l := &watchLanes{main: make([]*watchSet, max(1, shards)), backfill: newWatchSet(), isBackfill: isBackfill}
	for i := range l.main {
		l.main[i] = newWatchSet()
	}
	return l
}

// mainOf is the shard of key's main lanes (FNV-1a of the key).
func (l *watchLanes) mainOf(key string) *watchSet {
	if len(l.main) == 1 {
		return l.main[0]
	}
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return l.main[h%uint32(len(l.main))]
}

// add watches key's streams from the given ids, each in its set.
func (l *watchLanes) add(key string, after map[string]string) {
	main := make(map[string]string, len(after))
	var bf map[string]string
	for st, id := range after {
		if l.isBackfill(key, st) {
			if bf == nil {
				bf = make(map[string]string, len(after))
			}
			bf[st] = id
			continue
		}
		main[st] = id
	}
	l.mainOf(key).add(key, main)
	if bf != nil {
		l.backfill.add(key, bf)
	}
}

// remove stops watching key's main lanes (its worker reads them).
func (l *watchLanes) remove(key string) { l.mainOf(key).remove(key) }

// forget stops watching every lane of key (it is no longer the node's,
// or parked).
func (l *watchLanes) forget(key string) {
	l.mainOf(key).remove(key)
	l.backfill.remove(key)
}

// waitLoop waits on every stream of ws (the main lanes, or the backfill
// lanes: watchLanes) with the broker's EntryWaiter and tells the
// coordinator which partitions got entries. It waits in two tiers, so
// that a partition that drains is watched within about a round trip
// without a wait being issued again over every idle partition:
//
//   - the base wait names every stream watched when it was issued. It is
//     issued again, with everything watched by then, as soon as it
//     returns (as a plain XREADGROUP BLOCK loop is), so under a steady
//     flow each re-issue takes in what drained meanwhile;
//   - the fresh wait, beside it, names only the streams (re)added since
//     the base wait was issued. Additions restart it, at most once per
//     max(WaitRestart, 10µs x its streams), and at most about 500 times
//     a second while partitions keep draining (waitRestartStreams): the
//     server's work for a restart is in proportion to what changed, not
//     to the whole set.
//
// When the fresh wait would name more than a quarter of the base's
// streams (and more than 64), the base wait is restarted to take them in instead. Streams a wait found entries on leave the set before they are
// reported (watchSet.fired), so the wait issued right after does not find
// the same entries again; their partitions come back when they drain.
//
// Issuing a blocking wait costs the server work in proportion to the
// streams it names (each is looked up and registered, then unregistered:
// see waitBudget). While nothing changes the loop costs one blocking call
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
func (p *Subscription) waitLoop(ctx context.Context, ws *watchSet, budget, restarts *waitBudget) {
	defer p.wg.Done()
	backoff := backoff.New(100*time.Millisecond, p.cfg.WaitTimeout, p.jit)
	// budget spaces the base wait's issues, restarts the fresh wait's
	// restarts for additions (a re-issue after a return is not counted:
	// entries pay for it); the main lanes' shards share theirs.
	for ctx.Err() == nil {
		announced, changed := p.announced.state()
		if announced && p.checker != nil {
			// Appends are announced: check, do not wait (announce.go).
			if failed := p.checkLoop(ctx, ws, changed); failed {
				if !p.sleep(ctx, backoff.Next()) {
					return
				}
				continue
			}
			backoff.Reset()
			continue
		}
		base, epoch, added := ws.snapshot()
		if len(base) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-added:
				continue
			case <-changed:
				continue
			}
		}
		if d := budget.spend(p.clk.Now(), len(base)); d > 0 {
			if !p.sleep(ctx, d) {
				return
			}
			if base, epoch, added = ws.snapshot(); len(base) == 0 {
				continue
			}
		}
		if failed := p.waitTiers(ctx, ws, base, epoch, added, changed, restarts); failed {
			if !p.sleep(ctx, backoff.Next()) {
				return
			}
			continue
		}
		backoff.Reset()
	}
}

// waitBudget bounds the server time the base wait's issues take under a
// steady flow, when it returns at every entry: an issue over n streams is
// counted as n x waitIssueCost, and issues wait while the count runs
// ahead of the clock by more than waitBurst. An issue costs the server
// about 0.35-0.7µs a stream (registering the blocked client on each
// stream, and unregistering it when one has an entry: INFO commandstats,
// BenchmarkLatencyRedis, 2,000 and 1,000 streams), so the budget keeps
// the issues under about half a Redis core, what a plain XREADGROUP loop
// over the same streams spends at its busiest, and costs no delay at all
// while entries are sparse. Under a flow that hits the budget, an entry
// waits for the next issue at most n x waitIssueCost (1 ms for 1,000
// streams). It was 8µs until the live path: the issues then took up to
// 16 ms for 2,000 streams, which made the wait itself the largest part
// of the latency at 500 events/s (docs/decisions/0035-live-reads.md).
type waitBudget struct {
	mu sync.Mutex
	at time.Time
}

const (
	waitIssueCost = time.Microsecond
	waitBurst     = 20 * time.Millisecond
)

// spend counts an issue over n streams at now and returns how long to
// wait before it.
func (b *waitBudget) spend(now time.Time, n int) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if floor := now.Add(-waitBurst); b.at.Before(floor) {
		b.at = floor
	}
	b.at = b.at.Add(time.Duration(n) * waitIssueCost)
	return max(0, b.at.Sub(now))
}

// due is how long an issue would wait now, without counting it.
func (b *waitBudget) due(now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return max(0, b.at.Sub(now))
}

// waitRestartStreams is what a restart of the fresh wait counts besides
// its streams, for the round trip that interrupts the running wait and
// the new wait's call: as much as 2,000 streams (2ms), so that restarts
// for additions run at most about 500 a second while partitions keep
// draining (a bulk drain, or a flow over many partitions) and at once
// while they are rare.
const waitRestartStreams = 2000

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

func (p *Subscription) startWait(ctx context.Context, from map[string]string) *pendingWait {
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
func (p *Subscription) reportWait(ctx context.Context, ws *watchSet, d waitDone) (failed bool) {
	if ctx.Err() != nil {
		return false
	}
	if d.err != nil && !d.stopped {
		p.log.Warn("waiting for entries failed", "subscription", p.cfg.Name, "streams", len(d.from), "err", d.err)
		observe.Error(p.obs, runtime.ErrorEvent{Subscription: p.cfg.Name, Op: "wait", Err: d.err})
		return true
	}
	if keys := ws.fired(d.streams, d.from); len(keys) > 0 {
		news := newsMain
		if ws == p.watch.backfill {
			news = newsBackfill
		}
		p.send(evWake{keys: keys, news: news})
	}
	return false
}

// waitTiers runs one base wait on base (the watch set as of epoch), and
// fresh waits beside it on what is added after, until the base wait
// returns or must take the fresh streams in, or the announcements change
// (changed closed). failed: a wait failed.
func (p *Subscription) waitTiers(ctx context.Context, ws *watchSet, base map[string]string, epoch uint64, added, changed <-chan struct{}, restarts *waitBudget) (failed bool) {
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
			failed = p.reportWait(ctx, ws, fw.finish()) || failed
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
		case <-changed:
			// Announcements began (or changed): the loop checks instead.
			stopFresh()
			return p.reportWait(ctx, ws, bw.finish()) || failed
		case d := <-bw.done:
			stopFresh()
			return p.reportWait(ctx, ws, d) || failed
		case d := <-freshDone:
			fw = nil
			if p.reportWait(ctx, ws, d) {
				p.reportWait(ctx, ws, bw.finish())
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
			p.reportWait(ctx, ws, bw.finish())
			return true
		}
		var fresh map[string]string
		fresh, _, added = ws.since(epoch)
		for st, id := range fresh {
			if base[st] == id {
				delete(fresh, st) // the base wait covers it as it is
			}
		}
		if len(fresh) > 64 && len(fresh) > len(base)/4 {
			return p.reportWait(ctx, ws, bw.finish())
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
func (p *Subscription) discoverLoop(ctx context.Context) {
	defer p.wg.Done()
	const page = 1000
	backoff := backoff.New(time.Second, min(p.cfg.DiscoverEvery, 5*time.Second), p.jit)
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
			observe.Error(p.obs, runtime.ErrorEvent{Subscription: p.cfg.Name, Op: "discover", Err: scanErr})
			wait = backoff.Next()
		} else {
			backoff.Reset()
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
func (p *Subscription) signalLoop(ctx context.Context, category string) {
	defer p.wg.Done()
	first := true
	rewatch.Loop[string]{
		Clock:   p.clk,
		Backoff: backoff.New(100*time.Millisecond, 5*time.Second, p.jit),
		Watch: func(ctx context.Context) (<-chan string, error) {
			return p.pwatch.WatchPartitions(ctx, category)
		},
		Established: func() {
			select {
			case p.rediscover <- struct{}{}:
			default:
			}
			if !first {
				p.send(evResync{})
			}
			first = false
		},
		Follow: func(ch <-chan string) {
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
		},
		Failed: func(err error) {
			observe.Error(p.obs, runtime.ErrorEvent{Subscription: p.cfg.Name, Op: "watch partitions", Err: err})
		},
	}.Run(ctx)
}

// ledgerLoop follows operator requests: signals from WatchRequests, and
// a re-read of the subscription's parked entries every LedgerPollEvery
// (signals are hints; the re-read also makes requests survive restarts
// and reach a partition's new owner). Each time the watch is established
// (at start, and again after a signal may have been lost) the entries are
// re-read at once: a request made before the subscription was confirmed
// sent no signal this node saw.
func (p *Subscription) ledgerLoop(ctx context.Context) {
	defer p.wg.Done()
	relist := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		rewatch.Loop[string]{
			Clock:   p.clk,
			Backoff: backoff.New(time.Second, p.cfg.LedgerPollEvery, p.jit),
			Watch: func(ctx context.Context) (<-chan string, error) {
				return p.cfg.Ledger.WatchRequests(ctx, p.cfg.Name)
			},
			Established: func() {
				select {
				case relist <- struct{}{}:
				default:
				}
			},
			Follow: func(ch <-chan string) {
				for key := range ch {
					p.send(evLedgerSignal{key: key})
				}
			},
			Failed: func(err error) {
				observe.Error(p.obs, runtime.ErrorEvent{Subscription: p.cfg.Name, Op: "watch requests", Err: err})
			},
		}.Run(ctx)
	}()
	backoff := backoff.New(time.Second, p.cfg.LedgerPollEvery, p.jit)
	for {
		started := p.ledgerReads.Add(1)
		entries, err := p.cfg.Ledger.ListParked(ctx, p.cfg.Name)
		if ctx.Err() != nil {
			return
		}
		wait := p.cfg.LedgerPollEvery
		if err != nil {
			p.log.Warn("reading the failure ledger failed", "subscription", p.cfg.Name, "err", err)
			observe.Error(p.obs, runtime.ErrorEvent{Subscription: p.cfg.Name, Op: "list parked", Err: err})
			wait = backoff.Next()
		} else {
			backoff.Reset()
			p.send(evLedgerList{entries: entries, started: started})
		}
		t := p.clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-relist:
			t.Stop()
		}
	}
}

// sleep waits d on the subscription's clock; false when ctx ended first.
func (p *Subscription) sleep(ctx context.Context, d time.Duration) bool {
	return clock.Sleep(ctx, p.clk, d)
}

var errStopped = errors.New("runtime: subscription stopping")
