package topic

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/backoff"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
	"github.com/protctl/protctl/pkg/runtime/internal/rewatch"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// ledgerLoop follows operator requests for sr: signals from
// WatchRequests, and a re-read of its parked entries every
// LedgerPollEvery (signals are hints). The owner of the entry's partition
// acts; other nodes ignore it. Each time the watch is established (at
// start, and again after a signal may have been lost) the entries are
// re-read at once: a request made before the subscription was confirmed
// sent no signal this node saw.
func (t *Consumer) ledgerLoop(ctx context.Context, sr *Runtime) {
	defer t.wg.Done()
	relist := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		rewatch.Loop[string]{
			Clock:   t.clk,
			Backoff: backoff.New(time.Second, t.cfg.LedgerPollEvery, t.jit),
			Watch: func(ctx context.Context) (<-chan string, error) {
				return t.cfg.Ledger.WatchRequests(ctx, sr.cfg.Name)
			},
			Established: func() {
				select {
				case relist <- struct{}{}:
				default:
				}
			},
			Follow: func(ch <-chan string) {
				for agg := range ch {
					octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
					entries, err := t.entriesOf(octx, sr.cfg.Name, agg)
					cancel()
					if err == nil {
						for _, e := range entries {
							t.actOnEntry(ctx, sr, e)
						}
					}
				}
			},
			Failed: func(err error) {
				observe.Error(t.obs, runtime.ErrorEvent{Subscription: t.name, Op: "watch requests", Err: err})
			},
		}.Run(ctx)
	}()
	b := backoff.New(time.Second, t.cfg.LedgerPollEvery, t.jit)
	wait := t.cfg.LedgerPollEvery
	for {
		tm := t.clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			tm.Stop()
			return
		case <-tm.C():
		case <-relist:
			tm.Stop()
		}
		wait = t.cfg.LedgerPollEvery
		// The list's number is taken before it starts: reconcile compares
		// it with when each local park became known (parkState.seen).
		listed := sr.ledgerReads.Add(1)
		octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
		entries, err := t.cfg.Ledger.ListParked(octx, sr.cfg.Name)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			observe.Error(t.obs, runtime.ErrorEvent{Subscription: t.name, Op: "list parked", Err: err})
			wait = b.Next() // a failed read is tried again soon, not a period later
			continue
		}
		b.Reset()
		byPart := t.entriesByPartition(entries)
		for _, tp := range t.heldParts() {
			if sp := tp.subOf(sr); sp != nil {
				sp.reconcile(byPart[tp.p], listed)
			}
		}
		for _, e := range entries {
			if e.Request == nil {
				continue
			}
			// The list may be stale by now (a signal may have been acted
			// on meanwhile): act on the entry as it is.
			octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
			fresh, err := t.cfg.Ledger.GetParked(octx, sr.cfg.Name, e.Partition, e.Aggregate)
			cancel()
			if err == nil {
				t.actOnEntry(ctx, sr, fresh)
			}
		}
	}
}

// actOnEntry carries out e's request when this node holds its partition.
func (t *Consumer) actOnEntry(ctx context.Context, sr *Runtime, e ledger.Parked) {
	if e.Request == nil || e.Source != source.Kafka || e.Topic != t.cfg.Topic {
		return
	}
	p, err := strconv.ParseInt(e.Partition, 10, 32)
	if err != nil {
		return
	}
	tp := t.heldPart(int32(p))
	if tp == nil {
		return
	}
	if err, ok := tp.operate(ctx, sr, e.Request.Action, e); ok && err != nil && ctx.Err() == nil {
		t.log.Warn("operator request failed", "subscription", sr.cfg.Name, "aggregate", e.Aggregate,
			"action", e.Request.Action, "err", err)
	}
}

// operate carries out an operator's retry or skip on this partition,
// when it is held and trusted; handled is false otherwise (the caller
// forwards the request through the ledger).
func (tp *topicPart) operate(ctx context.Context, sr *Runtime, action ledger.Action, e ledger.Parked) (error, bool) {
	if !tp.lease.trusted(tp.t.clk.Now()) {
		return nil, false
	}
	tp.mu.Lock()
	closed := tp.closed
	var sp *subPart
	for _, s := range tp.subs {
		if s.sr == sr {
			sp = s
		}
	}
	tp.mu.Unlock()
	if closed || sp == nil {
		return nil, false
	}
	return sp.act(ctx, action, e), true
}

func (tp *topicPart) subOf(sr *Runtime) *subPart {
	for _, sp := range tp.subs {
		if sp.sr == sr {
			return sp
		}
	}
	return nil
}

// reportLost records offsets [from, to) of partition p that sr can never
// handle: the topic no longer retains them.
func (s *Runtime) reportLost(p int32, from, to int64, why string) {
	t := s.t
	if to <= from {
		return
	}
	s.c.lost.Add(to - from)
	err := &kafkasource.OffsetError{Topic: t.cfg.Topic, Partition: p, Offset: from, Earliest: to, Head: -1,
		Err: kafkasource.ErrOffsetNotRetained}
	t.log.Error("records lost to retention before they were handled", "subscription", s.cfg.Name,
		"partition", p, "from", from, "to", to, "why", why)
	observe.Error(t.obs, runtime.ErrorEvent{Subscription: t.name, Op: "retention", Err: err})
}
