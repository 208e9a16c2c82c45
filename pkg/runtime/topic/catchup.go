package topic

import (
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/backoff"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
)

var (
	errWindowFull   = errors.New("runtime: in-flight window full")
	errCatchUpEnded = errors.New("runtime: catch-up ended")
)

func (sp *subPart) startCatchUpLocked() {
	if sp.catching || sp.tp.closed {
		return
	}
	sp.catching = true
	sp.tp.wg.Add(1)
	go sp.catchUp()
}

// catchUp brings a subscription far behind (or detached because its
// window filled while the others went on) up to the shared reader, on
// its own reader: bounded scans from its position to the shared reader's,
// each under the node-wide catch-up limit and only while its window has
// room. When it reaches the shared reader's position it attaches again.
func (sp *subPart) catchUp() {
	tp := sp.tp
	t := tp.t
	defer tp.wg.Done()
	sp.sr.c.catchUps.Add(1)
	b := backoff.New(100*time.Millisecond, t.cfg.RenewEvery, t.jit)
	for {
		tp.mu.Lock()
		for !tp.closed && tp.ctx.Err() == nil && !sp.sr.failed.Load() && sp.win.inflight() > t.cfg.MaxInFlight/2 {
			tp.cond.Wait()
		}
		if tp.closed || tp.ctx.Err() != nil || sp.sr.failed.Load() {
			sp.catching = false
			tp.mu.Unlock()
			return
		}
		if sp.next >= tp.tailPos {
			sp.catching = false
			sp.attached = true
			tp.balanceLocked()
			tp.mu.Unlock()
			tp.kickFetch()
			return
		}
		from, to, gen := sp.next, tp.tailPos, sp.seekGen
		tp.mu.Unlock()

		if err := t.cfg.CatchUp.acquire(tp.ctx); err != nil {
			continue // the loop ends above
		}
		_, err := t.cfg.Source.Scan(tp.ctx, t.cfg.Topic, tp.p, from, to, func(r *kgo.Record) error {
			in := t.recInfoOf(r, tp.pstr)
			tp.mu.Lock()
			defer tp.mu.Unlock()
			if tp.closed || sp.sr.failed.Load() || sp.seekGen != gen {
				return errCatchUpEnded
			}
			if sp.win.inflight() >= t.cfg.MaxInFlight {
				return errWindowFull
			}
			sp.deliverOneLocked(r, &in)
			sp.kickLocked()
			return nil
		})
		t.cfg.CatchUp.release()
		var oe *kafkasource.OffsetError
		switch {
		case err == nil || errors.Is(err, errWindowFull) || errors.Is(err, errCatchUpEnded):
			b.Reset()
		case errors.As(err, &oe) && errors.Is(err, kafkasource.ErrOffsetNotRetained):
			tp.mu.Lock()
			if sp.next < oe.Earliest {
				sp.sr.reportLost(tp.p, sp.next, oe.Earliest, "retention passed the catch-up reader")
				sp.next = oe.Earliest
			}
			tp.mu.Unlock()
		case tp.ctx.Err() != nil:
		default:
			t.log.Warn("catch-up read failed", "subscription", sp.sr.cfg.Name, "partition", tp.p, "err", err)
			observe.Error(t.obs, runtime.ErrorEvent{Subscription: t.name, Op: "catch up", Err: err})
			t.sleep(tp.ctx, b.Next())
		}
	}
}
