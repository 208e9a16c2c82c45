package partitioned

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/backoff"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
	"github.com/protctl/protctl/pkg/runtime/internal/rewatch"
)

// rescanGap is the shortest time between the starts of two scans of
// indexes holding n keys in all when a changed count or a new watch
// brings a scan forward: 100ms, or 2µs a key (a scan reads 1,000 keys a
// call, about 1ms of the server's time), so that scanning takes at most
// about half a Redis core while keys keep arriving: 0.1s up to 50,000
// keys, 2s for 1,000,000.
func rescanGap(n int64) time.Duration {
	return max(100*time.Millisecond, time.Duration(n)*2*time.Microsecond)
}

// indexPollLoop counts every category's index each DiscoverPollEvery (1s
// at least while append events arrive) and asks the discovery loop for a
// scan when a count changed since the previous poll. The first poll asks
// for one too: a key added between the start's scan and it would
// otherwise go unnoticed until DiscoverEvery. While append events arrive
// a changed count asks for nothing: the events name the new keys, and a
// scan of a large index is what discovery costs most (1,000,000 keys:
// 1,000 SSCAN calls every 2 s, and a node's CPU, BenchmarkDiscoveryCost);
// events lost while their connection is re-established are covered by
// the scan each new subscription asks for, and by DiscoverEvery's.
func (p *Subscription) indexPollLoop(ctx context.Context) {
	defer p.wg.Done()
	last := make(map[string]int64, len(p.cfg.Categories))
	first := true
	for {
		changed := false
		for _, cat := range p.cfg.Categories {
			n, err := p.counter.CountPartitionKeys(ctx, cat)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				observe.Error(p.obs, runtime.ErrorEvent{Subscription: p.cfg.Name, Op: "count partition keys", Err: err})
				continue
			}
			if prev, ok := last[cat]; !ok || prev != n {
				changed = true
			}
			last[cat] = n
		}
		if (changed && !p.appendEvents.Load()) || first {
			first = false
			select {
			case p.rediscover <- struct{}{}:
			default:
			}
		}
		every := p.cfg.DiscoverPollEvery
		if p.appendEvents.Load() {
			every = max(every, time.Second)
		}
		if !p.sleep(ctx, every) {
			return
		}
	}
}

// appendLoop follows the server's announcements of appends to category's
// streams (AppendWatcher): each names a stream; its partition key, once
// checked against the index, goes to the coordinator as a publish signal
// does (a new key is taken on, a known one woken). Each time the watch is
// established it asks for a scan, which finds what was appended before.
func (p *Subscription) appendLoop(ctx context.Context, category string) {
	defer p.wg.Done()
	backoff := backoff.New(time.Second, p.cfg.DiscoverEvery, p.jit)
	// indexed remembers keys already checked against the index (bounded:
	// cleared when it grows past 100,000); unindexed the candidates an
	// announcement named before the index held them (a publisher that
	// appends before it indexes), checked again when the index changes.
	indexed := make(map[string]bool)
	unindexed := make(map[string]time.Time)
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(ctx)
		ch, err := p.appends.WatchAppends(wctx, category)
		if err != nil {
			cancel()
			if ctx.Err() != nil {
				return
			}
			p.log.Debug("no append events: new keys are found by polling the index", "subscription", p.cfg.Name, "category", category, "err", err)
			if !p.sleep(ctx, backoff.Next()) {
				return
			}
			continue
		}
		began := p.clk.Now()
		p.appendEvents.Store(true)
		p.announced.set(category, true)
		select {
		case p.rediscover <- struct{}{}:
		default:
		}
		p.followAppends(ctx, category, ch, indexed, unindexed)
		// Names may have been missed: the wait loops wait again, from the
		// ids they watch from, before the next watch is asked for.
		p.announced.set(category, false)
		p.appendEvents.Store(false)
		cancel()
		for range ch { // the watch's goroutines close it once ended
		}
		// A watch that ends as soon as it began (a connection dropped at
		// once, a Cluster that names no master) is asked for again after
		// a back-off, not at once: each attempt costs the server a
		// connection and turns every wait loop out of announced mode and
		// back.
		if p.clk.Now().Sub(began) < rewatch.Settled {
			if !p.sleep(ctx, backoff.Next()) {
				return
			}
			continue
		}
		backoff.Reset()
	}
}

// followAppends wakes the partitions of the names ch announces until it
// closes or the subscription stops. A candidate key the index does not
// confirm is still woken if the node knows it (evAnnounced): the watched
// lanes of a key span every category, and only a new key needs its
// category's index. When the index check fails, the known candidates are
// woken and a scan is asked for, which finds the new ones.
func (p *Subscription) followAppends(ctx context.Context, category string, ch <-chan string, indexed map[string]bool, unindexed map[string]time.Time) {
	s := newAppendScratch(p.layout.IndexKey(category))
	for name := range ch {
		s.batch = p.appendBatches.Add(1) // unique across the categories' loops
		names := s.names
		clear(names)
		names[name] = true
	drain:
		for len(names) < 1024 {
			select {
			case n, ok := <-ch:
				if !ok {
					break drain
				}
				names[n] = true
			default:
				break drain
			}
		}
		keys, news, unconfirmed, ok := p.appendedKeys(ctx, category, names, indexed, unindexed, s)
		if len(keys) > 0 && !p.send(evSignal{keys: keys, news: news, batch: s.batch}) {
			return
		}
		if len(unconfirmed) > 0 && !p.send(evAnnounced{keys: unconfirmed}) {
			return
		}
		if !ok {
			select {
			case p.rediscover <- struct{}{}:
			default:
			}
		}
	}
}

// appendScratch holds the maps followAppends and appendedKeys work in,
// kept from one batch of names to the next: a batch is most often one
// name (an append at a time), and making four maps anew for each was 15%
// of the runtime's allocations at 32,000 events/s
// (BenchmarkSustainableRateRedis, -memprofile).
type appendScratch struct {
	index                string // the category's index key
	names, seen, recheck map[string]bool
	lanes                map[string]laneNews
	batch                uint64 // this batch of names' number (evCandidates)
}

func newAppendScratch(index string) *appendScratch {
	return &appendScratch{index: index, names: map[string]bool{}, seen: map[string]bool{}, recheck: map[string]bool{}, lanes: map[string]laneNews{}}
}

// appendedKeys maps announced stream names to the partition keys of the
// index they belong to. A name may be a lane's (C:K:backfill) or a key
// may contain the separator, so every reading is a candidate; the index
// decides (one SMISMEMBER for candidates not checked before; a key
// remembered not indexed is checked again, as it may be indexed now).
// The index's own name (announced when it gains a key) has the candidates
// found not indexed in the last unindexedFor checked again: their
// publisher appended before it indexed. news is, per key of keys, the
// lanes that were appended to (0: none, the key was only checked again).
func (p *Subscription) appendedKeys(ctx context.Context, category string, names map[string]bool, indexed map[string]bool, unindexed map[string]time.Time, s *appendScratch) (keys []string, news []laneNews, unconfirmed []string, ok bool) {
	var check []string
	// recheck marks the candidates checked again only because the index
	// changed: nothing was appended to them now, so they are taken on if
	// indexed, and woken for nothing otherwise.
	seen, recheck, lanes := s.seen, s.recheck, s.lanes
	clear(seen)
	clear(recheck)
	clear(lanes)
	defer func() {
		news = make([]laneNews, len(keys))
		for i, k := range keys {
			news[i] = lanes[k]
		}
	}()
	now := p.clk.Now()
	if names[s.index] {
		delete(names, s.index)
		for k, at := range unindexed {
			if now.Sub(at) > unindexedFor {
				delete(unindexed, k)
				continue
			}
			if !seen[k] {
				seen[k] = true
				recheck[k] = true
				check = append(check, k)
			}
		}
	}
	for name := range names {
		readings := streamKeys(p.layout, category, p.cfg.BackfillSuffix, name)
		// A name one of whose readings is a key known indexed is that
		// key's (C:K:backfill is K's lane): its other readings are not
		// checked, or each append to a lane would cost an index check
		// and remember a name that is no key among the unindexed.
		known := slices.ContainsFunc(readings, func(k string) bool { return indexed[k] })
		for _, k := range readings {
			if known && !indexed[k] {
				continue
			}
			lanes[k] |= p.laneOf(category, k, name)
			if seen[k] {
				delete(recheck, k) // appended now, not only checked again
				continue
			}
			seen[k] = true
			if indexed[k] {
				keys = append(keys, k)
			} else {
				check = append(check, k)
			}
		}
	}
	if len(check) == 0 {
		return keys, nil, nil, true
	}
	if p.indexAtAcquire[category] {
		// The keys this node owns need not wait for the check: their
		// acquisitions check the index themselves (evCandidates). A
		// name no publisher may give a key (C:K:__lease__ when the
		// subscription is named like its category, C:dlq) waits for
		// the check, which costs a round trip per batch rather than a
		// script per name.
		var (
			cands []string
			cnews []laneNews
		)
		for _, k := range check {
			if !recheck[k] && p.layout.ValidateKey(k, p.cfg.BackfillSuffix) == nil {
				cands = append(cands, k)
				cnews = append(cnews, lanes[k])
			}
		}
		if len(cands) > 0 && !p.send(evCandidates{category: category, keys: cands, news: cnews, batch: s.batch}) {
			return keys, nil, nil, true
		}
	}
	in, err := p.appends.PartitionKeysIndexed(ctx, category, check)
	if err != nil {
		if ctx.Err() == nil {
			observe.Error(p.obs, runtime.ErrorEvent{Subscription: p.cfg.Name, Op: "partition keys indexed", Err: err})
		}
		for _, k := range check {
			if !recheck[k] {
				unconfirmed = append(unconfirmed, k)
			}
		}
		return keys, nil, unconfirmed, false
	}
	if len(indexed)+len(check) > 100_000 {
		clear(indexed)
	}
	for i, k := range check {
		if i < len(in) && in[i] {
			indexed[k] = true
			delete(unindexed, k)
			keys = append(keys, k)
		} else if !recheck[k] {
			unconfirmed = append(unconfirmed, k)
			// Remembered from its first announcement: checks again do not
			// extend its time.
			if _, ok := unindexed[k]; !ok && len(unindexed) < maxUnindexed {
				unindexed[k] = now
			}
		}
	}
	return keys, nil, unconfirmed, true
}

// laneOf says which of key's lanes in category stream is: newsMain,
// newsBackfill, or newsAll when it is neither.
func (p *Subscription) laneOf(category, key, stream string) laneNews {
	switch stream {
	case p.layout.Stream(category, key):
		return newsMain
	case p.layout.LaneStream(category, key, p.cfg.BackfillSuffix):
		return newsBackfill
	}
	return newsAll
}

// unindexedFor is how long a candidate found not indexed is checked again
// when the index changes, and maxUnindexed how many are remembered: a
// publisher indexes a key right after its first append, and a candidate
// that is no key at all (a lane of another key, a key name containing
// the separator) must not be checked forever.
const (
	unindexedFor = 10 * time.Second
	maxUnindexed = 10_000
)

// streamKeys returns the partition keys stream name of category may
// belong to: in the Protean layout C:K, C:K:<backfill> and C:K:dlq all
// read as K, and the whole of what follows C: as a key too; in the
// cluster layout the hash tag is the key.
func streamKeys(l broker.Layout, category, backfill, name string) []string {
	rest, ok := strings.CutPrefix(name, category+":")
	if !ok || rest == "" {
		return nil
	}
	if l.IsCluster() {
		tag, ok := strings.CutPrefix(rest, "{")
		if !ok {
			return nil
		}
		// Only the lanes: C:{K} and C:{K}:<backfill>. Other keys share the
		// prefix when a subscription (a group) is named like its category
		// (C:{K}:__lease__, C:{K}:__generation__); waking K for its own
		// lease writes would wake it forever.
		if k, lane, ok := strings.Cut(tag, "}"); ok && k != "" && (lane == "" || lane == ":"+backfill) {
			return []string{k}
		}
		return nil
	}
	out := []string{rest}
	for _, suffix := range []string{backfill, broker.DLQSuffix} {
		if k, ok := strings.CutSuffix(rest, ":"+suffix); ok && k != "" {
			out = append(out, k)
		}
	}
	return out
}
