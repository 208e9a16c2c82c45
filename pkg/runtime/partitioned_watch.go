package runtime

import (
	"context"
	"errors"
	"sync"
	"time"
)

// watchSet is the set of streams the node waits on: every lane of every
// partition that is assigned to the node and drained, whether it still
// holds its lease (for IdleAfter) or not. It maps each stream to the id
// after which an entry is news. Workers add their partition when it
// drains and remove it when it reads again; the coordinator removes
// partitions it activates or gives away. The wait loop snapshots it.
type watchSet struct {
	mu      sync.Mutex
	after   map[string]string // stream -> last id known delivered
	keyOf   map[string]string // stream -> partition key
	streams map[string][]string
	added   chan struct{} // closed (and replaced) when streams are added
}

func newWatchSet() *watchSet {
	return &watchSet{
		after:   make(map[string]string),
		keyOf:   make(map[string]string),
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
	streams := make([]string, 0, len(after))
	for stream, id := range after {
		s.after[stream] = id
		s.keyOf[stream] = key
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
	}
	delete(s.streams, key)
}

// snapshot returns a copy of the stream ids and the channel closed at the
// next addition.
func (s *watchSet) snapshot() (map[string]string, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.after))
	for k, v := range s.after {
		out[k] = v
	}
	return out, s.added
}

// keys maps streams to their partition keys, skipping streams no longer
// watched (a wake for them is stale).
func (s *watchSet) keys(streams []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[string]bool, len(streams))
	var out []string
	for _, st := range streams {
		if k, ok := s.keyOf[st]; ok && !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

func (s *watchSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams)
}

// waitLoop waits on every watched stream at once with the broker's
// EntryWaiter and tells the coordinator which partitions got entries. A
// wait is restarted (at most once per WaitRestart) when partitions join
// the set, so that a partition that just drained is watched within
// WaitRestart even for entries no wake-up signal announces. While nothing
// changes, the loop costs one blocking call per WaitTimeout.
//
// Issuing a blocking wait costs the server work in proportion to the
// streams it names (each is looked up and registered, then unregistered):
// about 5µs a stream, so 50ms for 10,000 streams. The loop therefore
// issues at most one wait per max(WaitRestart, 100µs x streams), which
// keeps it under about 5% of a Redis core however often partitions come
// and go; between two waits nothing is missed, because each wait starts
// from the ids the partitions were last known delivered up to.
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
	var last time.Time
	for ctx.Err() == nil {
		after, added := p.watch.snapshot()
		if len(after) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-added:
				continue
			}
		}
		gap := max(p.cfg.WaitRestart, time.Duration(len(after))*100*time.Microsecond)
		if wait := last.Add(gap).Sub(p.clk.Now()); !last.IsZero() && wait > 0 {
			if !p.sleep(ctx, wait) {
				return
			}
			after, added = p.watch.snapshot()
			if len(after) == 0 {
				continue
			}
		}
		last = p.clk.Now()
		wctx, cancel := context.WithCancel(ctx)
		restart := make(chan struct{})
		go func() {
			select {
			case <-added:
			case <-restart:
				return
			}
			t := p.clk.NewTimer(gap)
			defer t.Stop()
			select {
			case <-t.C():
				cancel()
			case <-restart:
			}
		}()
		streams, err := p.waiter.WaitForEntries(wctx, after, p.cfg.WaitTimeout)
		close(restart)
		restarted := wctx.Err() != nil
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && restarted:
			continue
		case err != nil:
			p.log.Warn("waiting for entries failed", "subscription", p.cfg.Name, "streams", len(after), "err", err)
			p.obs.error(ErrorEvent{Subscription: p.cfg.Name, Op: "wait", Err: err})
			if !p.sleep(ctx, backoff.next()) {
				return
			}
			continue
		}
		backoff.reset()
		if keys := p.watch.keys(streams); len(keys) > 0 {
			p.send(evWake{keys: keys})
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
		t := p.clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-p.rediscover:
			t.Stop()
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
		started := p.clk.Now()
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
