package partitioned

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/backoff"
	"github.com/protctl/protctl/pkg/runtime/internal/lease"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// handleBatch calls the handler on each message in order, then acks the
// batch in one fenced call. An interruption (hand-over, stop) between two
// messages acks what was handled and leaves the rest pending for the next
// owner.
func (w *worker) handleBatch(ln lane, msgs []broker.Message) (result, bool) {
	if r, stop := w.takeSlot(); stop { // on the live path, read without one
		return r, true
	}
	// One allocation for the batch's acks rather than one per doubling.
	w.acks[ln.stream] = slices.Grow(w.acks[ln.stream], len(msgs))
	for i, m := range msgs {
		if i > 0 {
			if r, stop := w.interrupted(); stop {
				return r, true
			}
		}
		isHead := w.retrying != nil && m.ID == w.retrying.Position && (w.retrying.Stream == "" || w.retrying.Stream == ln.stream)
		if m.Missing {
			w.reportMissing(ln, m.ID, "read")
			w.acks[ln.stream] = append(w.acks[ln.stream], m.ID)
		} else {
			if r, done := w.handle(ln, m); done {
				return r, true
			}
			w.acks[ln.stream] = append(w.acks[ln.stream], m.ID)
		}
		if isHead {
			if r, done := w.flushAcks(); done {
				return r, true
			}
			if r, done := w.resolveRetry(); done {
				return r, true
			}
		}
	}
	if w.readLive && !w.full {
		// Most likely drained: the next read, which acks this batch, goes
		// on the live path with the other partitions', and the slot to
		// whoever has something to handle. After a full batch (a backlog)
		// the worker keeps its slot and reads on the pinned reader, the
		// backlog's last, short batch too: its ack rides on a transaction
		// there, where a script would take the ids through Lua.
		w.releaseSlot()
	}
	if w.p.ackReader != nil {
		// Acked by the lane's next read (AckAndReadPartitionFenced), which
		// follows at once; every way out of the loop flushes first.
		return result{}, false
	}
	return w.flushAcks()
}

// handle delivers one message until it succeeds, its partition is parked
// (aggregate failures), or the worker must end. done with a result means
// the worker ends.
func (w *worker) handle(ln lane, m broker.Message) (result, bool) {
	p := w.p
	var retry, backOff *backoff.Backoff // made on the first failure only
	// A parked head being retried goes on counting its attempts (3 parked
	// + 3 more = 6), in Message.Attempt and in the ledger when it parks
	// again; it still gets Retry.Attempts tries before parking.
	base := 0
	if r := w.retrying; r != nil && m.ID == r.Position && (r.Stream == "" || r.Stream == ln.stream) {
		base = r.Attempts
	}
	for attempt := 1; ; attempt++ {
		if !w.lease.trusted(p.clk.Now()) {
			w.lease.lose(lease.ErrUntrusted)
			return w.lostResult(), true
		}
		if w.ctx.Err() != nil {
			return w.ctxResult(), true
		}
		err := w.call(ln, m, base+attempt)
		if err == nil {
			p.c.processed.Add(1)
			if w.backingOff {
				w.backingOff = false
				if p.backingOff.set(w.key, false) {
					observe.BackOff(p.obs, runtime.BackOffEvent{Subscription: p.cfg.Name, Partition: w.key, BackingOff: false})
					p.log.Info("partition no longer backing off", "subscription", p.cfg.Name, "key", w.key)
				}
			}
			return result{}, false
		}
		p.c.failed.Add(1)
		if w.ctx.Err() != nil {
			// The lease went (or the node stops hard) while the handler
			// ran: its failure says nothing about the message.
			return w.ctxResult(), true
		}
		if !w.lease.trusted(p.clk.Now()) {
			// The same, noticed here first (a handler that saw it through
			// LeaseTrusted and stopped).
			w.lease.lose(lease.ErrUntrusted)
			return w.lostResult(), true
		}
		var wait time.Duration
		switch runtime.Classify(err) {
		case runtime.FailFatal:
			if r, done := w.flushAcks(); done {
				return r, true
			}
			p.log.Error("fatal handler failure: stopping the subscription", "subscription", p.cfg.Name, "key", w.key, "id", m.ID, "err", err)
			return w.release(result{kind: resFatal, err: fmt.Errorf("runtime: %s: key %q entry %s: %w", p.cfg.Name, w.key, m.ID, err)}, "fatal"), true
		case runtime.FailSystemic:
			if backOff == nil {
				backOff = backoff.New(p.cfg.SystemicBackoff, p.cfg.SystemicMaxBackoff, p.jit)
			}
			wait = backOff.Next()
			w.backingOff = true
			if p.backingOff.set(w.key, true) {
				p.log.Warn("partition backing off after a systemic failure", "subscription", p.cfg.Name, "key", w.key, "id", m.ID, "err", err)
			}
			observe.BackOff(p.obs, runtime.BackOffEvent{Subscription: p.cfg.Name, Partition: w.key, BackingOff: true, Err: err, RetryIn: wait})
		default:
			if attempt >= p.cfg.Retry.Attempts {
				return w.park(ln, m, err, base+attempt)
			}
			if retry == nil {
				retry = backoff.New(p.cfg.Retry.Backoff, p.cfg.Retry.MaxBackoff, p.jit)
			}
			wait = retry.Next()
			p.log.Debug("handler failed; retrying", "subscription", p.cfg.Name, "key", w.key, "id", m.ID, "attempt", attempt, "err", err)
		}
		// Ack what the batch handled so far before waiting, so that a
		// lease lost meanwhile costs no redelivery of it.
		if r, done := w.flushAcks(); done {
			return r, true
		}
		if r, stop := w.waitOut(wait); stop {
			return r, true
		}
	}
}

// call runs the handler once, turning a panic into an aggregate failure.
func (w *worker) call(ln lane, m broker.Message, attempt int) (err error) {
	p := w.p
	msg := runtime.Message{
		Subscription: p.cfg.Name,
		Source:       source.Redis,
		Category:     ln.category,
		Key:          w.key,
		Stream:       ln.stream,
		Aggregate:    w.key,
		Position:     m.ID,
		Data:         m.Data,
		Generation:   w.lease.gen,
		Attempt:      attempt,
	}
	observed := p.obs != nil && p.obs.OnHandled != nil
	var start time.Time
	if observed {
		start = p.clk.Now()
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("runtime: handler panicked: %v", r)
		}
		if !observed {
			return
		}
		var class runtime.FailureClass
		if err != nil {
			class = runtime.Classify(err)
		}
		observe.Handled(p.obs, runtime.HandledEvent{
			Subscription: p.cfg.Name, Source: source.Redis, Partition: w.key, Aggregate: w.key,
			Position: m.ID, Attempt: attempt, Duration: p.clk.Now().Sub(start), Err: err, Class: class,
		})
	}()
	return p.cfg.Handler.Handle(w.hctx, msg)
}

// park records the failing head in the ledger (fenced) and releases the
// partition; the head stays pending for whoever retries or skips it.
func (w *worker) park(ln lane, m broker.Message, herr error, attempts int) (result, bool) {
	p := w.p
	if r, done := w.flushAcks(); done {
		return r, true
	}
	now := p.clk.Now()
	e := ledger.Parked{
		Subscription:  p.cfg.Name,
		Source:        source.Redis,
		Aggregate:     w.key,
		Category:      ln.category,
		Partition:     w.key,
		Position:      m.ID,
		Stream:        ln.stream,
		Error:         ledger.TruncateError(herr.Error()),
		Attempts:      attempts,
		ParkedAt:      now,
		LastAttemptAt: now,
		Status:        ledger.StatusParked,
		Owner:         p.node,
		Generation:    w.lease.gen,
	}
	wait := backoff.New(100*time.Millisecond, p.cfg.RenewEvery, p.jit)
	for {
		err := p.cfg.Ledger.Park(w.ctx, w.lease.fence, e)
		if err == nil {
			break
		}
		if errors.Is(err, broker.ErrLeaseLost) || w.ctx.Err() != nil {
			return w.ioFail("park", err), true
		}
		p.log.Warn("parking failed; retrying", "subscription", p.cfg.Name, "key", w.key, "err", err)
		observe.Error(p.obs, runtime.ErrorEvent{Subscription: p.cfg.Name, Op: "park", Err: err})
		if r, stop := w.waitOut(wait.Next()); stop {
			return r, true
		}
	}
	w.retrying = nil
	p.c.parked.Add(1)
	p.log.Warn("partition parked", "subscription", p.cfg.Name, "key", w.key, "stream", ln.stream, "id", m.ID,
		"attempts", attempts, "err", e.Error)
	observe.Parked(p.obs, e)
	return w.release(result{kind: resParked, parked: &e}, "parked"), true
}

// flushAcks acknowledges what was handled, one fenced call per lane. A
// transport failure is retried while the lease is trusted.
func (w *worker) flushAcks() (result, bool) {
	p := w.p
	for stream, ids := range w.acks {
		if len(ids) == 0 {
			continue
		}
		wait := backoff.New(50*time.Millisecond, p.cfg.RenewEvery, p.jit)
		for {
			if !w.lease.trusted(p.clk.Now()) {
				w.lease.lose(lease.ErrUntrusted)
				return w.lostResult(), true
			}
			_, err := p.cfg.Broker.AckPartitionFenced(w.ctx, w.lease.fence, stream, p.cfg.Name, ids...)
			if err == nil {
				p.c.acks.Add(1)
				break
			}
			if errors.Is(err, broker.ErrLeaseLost) || w.ctx.Err() != nil {
				return w.ioFail("ack", err), true
			}
			p.log.Warn("ack failed; retrying", "subscription", p.cfg.Name, "key", w.key, "err", err)
			observe.Error(p.obs, runtime.ErrorEvent{Subscription: p.cfg.Name, Op: "ack", Err: err})
			if !w.sleepTrusted(wait.Next()) {
				break
			}
		}
		w.acks[stream] = ids[:0]
	}
	return result{}, false
}
