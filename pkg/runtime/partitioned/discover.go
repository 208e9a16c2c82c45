package partitioned

import (
	"context"
	"strings"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/backoff"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
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
	// cleared when it grows past 100,000).
	indexed := make(map[string]bool)
	for ctx.Err() == nil {
		ch, err := p.appends.WatchAppends(ctx, category)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.log.Debug("no append events: new keys are found by polling the index", "subscription", p.cfg.Name, "category", category, "err", err)
			if !p.sleep(ctx, backoff.Next()) {
				return
			}
			continue
		}
		backoff.Reset()
		p.appendEvents.Store(true)
		select {
		case p.rediscover <- struct{}{}:
		default:
		}
		for name := range ch {
			names := map[string]bool{name: true}
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
			keys := p.appendedKeys(ctx, category, names, indexed)
			if len(keys) > 0 && !p.send(evSignal{keys: keys}) {
				return
			}
		}
		p.appendEvents.Store(false)
	}
}

// appendedKeys maps announced stream names to the partition keys of the
// index they belong to. A name may be a lane's (C:K:backfill) or a key
// may contain the separator, so every reading is a candidate; the index
// decides (one SMISMEMBER for candidates not checked before; a key
// remembered not indexed is checked again, as it may be indexed now).
func (p *Subscription) appendedKeys(ctx context.Context, category string, names map[string]bool, indexed map[string]bool) []string {
	var keys, check []string
	seen := make(map[string]bool)
	for name := range names {
		for _, k := range streamKeys(p.layout, category, p.cfg.BackfillSuffix, name) {
			if seen[k] {
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
		return keys
	}
	in, err := p.appends.PartitionKeysIndexed(ctx, category, check)
	if err != nil {
		if ctx.Err() == nil {
			observe.Error(p.obs, runtime.ErrorEvent{Subscription: p.cfg.Name, Op: "partition keys indexed", Err: err})
		}
		return keys
	}
	if len(indexed)+len(check) > 100_000 {
		clear(indexed)
	}
	for i, k := range check {
		if i < len(in) && in[i] {
			indexed[k] = true
			keys = append(keys, k)
		}
	}
	return keys
}

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
		if k, _, ok := strings.Cut(tag, "}"); ok && k != "" {
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
