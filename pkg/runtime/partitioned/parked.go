package partitioned

import (
	"errors"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// checkParked reads the key's ledger entry. done means the worker ends
// (the key stays parked, or the read failed).
func (w *worker) checkParked() (result, bool) {
	p := w.p
	e, err := p.cfg.Ledger.GetParked(w.ctx, p.cfg.Name, "", w.key)
	if errors.Is(err, ledger.ErrNotParked) {
		return result{}, false
	}
	if err != nil {
		return w.ioFail("get parked", err), true
	}
	var action ledger.Action
	switch {
	case e.Request != nil:
		action = e.Request.Action
	case e.Status == ledger.StatusRetrying:
		// The owner that took the request up died before finishing it.
		action = ledger.ActionRetry
	}
	switch action {
	case ledger.ActionRetry:
		w.retrying = &e
		return result{}, false
	case ledger.ActionSkip:
		w.skipping = &e
		return result{}, false
	}
	return w.release(result{kind: resParked, parked: &e}, "parked"), true
}

// skip carries out an operator's skip: the parked head is dead-lettered
// (copied to C:K:dlq and acked in one fenced step) and the entry
// resolved; the partition then goes on with the next message.
func (w *worker) skip() (result, bool) {
	p := w.p
	e := w.skipping
	w.skipping = nil
	ln, ok := w.laneOf(e)
	if !ok {
		p.log.Warn("parked entry names a stream outside the subscription; resolving it without dead-lettering",
			"subscription", p.cfg.Name, "key", w.key, "stream", e.Stream)
	}
	var dlqID string
	if ok && e.Position != "" {
		pending, err := p.cfg.Broker.ReadPartitionFenced(w.ctx, w.lease.fence, ln.stream, p.cfg.Name, int64(p.cfg.BatchSize), broker.ReadPending)
		if err != nil {
			return w.ioFail("read pending", err), true
		}
		p.c.reads.Add(1)
		for _, m := range pending {
			if m.ID != e.Position {
				continue
			}
			reason := "skipped by operator"
			if e.Request != nil {
				if e.Request.By != "" {
					reason += " " + e.Request.By
				}
				if e.Request.Reason != "" {
					reason += ": " + e.Request.Reason
				}
			}
			dlqID, err = p.cfg.Broker.DeadLetterPartitionFenced(w.ctx, w.lease.fence, ln.stream, p.cfg.Name, e.Position,
				p.layout.DLQStream(ln.category, w.key), reason)
			if err != nil {
				return w.ioFail("dead-letter", err), true
			}
			p.c.deadLetters.Add(1)
			break
		}
	}
	if err := p.cfg.Ledger.Resolve(w.ctx, w.lease.fence, p.cfg.Name, w.key); err != nil && !errors.Is(err, ledger.ErrNotParked) {
		return w.ioFail("resolve parked", err), true
	}
	w.resolved = true
	p.c.resolved.Add(1)
	p.log.Info("parked partition skipped", "subscription", p.cfg.Name, "key", w.key, "position", e.Position, "deadLetter", dlqID)
	observe.Resolved(p.obs, runtime.ResolvedEvent{Subscription: p.cfg.Name, Aggregate: w.key, Position: e.Position, Action: ledger.ActionSkip, DeadLetterID: dlqID})
	return result{}, false
}

// laneOf finds the lane a parked entry's head is on.
func (w *worker) laneOf(e *ledger.Parked) (lane, bool) {
	for _, ln := range w.lanes {
		if e.Stream != "" && ln.stream == e.Stream {
			return ln, true
		}
	}
	if e.Stream == "" {
		for _, ln := range w.lanes {
			if !ln.backfill && (e.Category == "" || ln.category == e.Category) {
				return ln, true
			}
		}
	}
	return lane{}, false
}

// resolveRetry closes an operator's retry once its head was handled (or
// turned out to be gone).
func (w *worker) resolveRetry() (result, bool) {
	p := w.p
	e := w.retrying
	w.retrying = nil
	if err := p.cfg.Ledger.Resolve(w.ctx, w.lease.fence, p.cfg.Name, w.key); err != nil && !errors.Is(err, ledger.ErrNotParked) {
		return w.ioFail("resolve parked", err), true
	}
	w.resolved = true
	p.c.resolved.Add(1)
	p.log.Info("parked partition retried", "subscription", p.cfg.Name, "key", w.key, "position", e.Position)
	observe.Resolved(p.obs, runtime.ResolvedEvent{Subscription: p.cfg.Name, Aggregate: w.key, Position: e.Position, Action: ledger.ActionRetry})
	return result{}, false
}

// ledgerList applies a full read of the parked entries. A key a worker
// parked or resolved after the read began keeps what the worker knew: the
// read is older.
func (c *coordinator) ledgerList(entries []ledger.Parked, started int64) {
	parked := make(map[string]*ledger.Parked, len(entries))
	for i := range entries {
		e := &entries[i]
		if e.Source != "" && e.Source != source.Redis {
			continue
		}
		parked[e.Aggregate] = e
	}
	for key, e := range parked {
		if pt := c.parts[key]; pt != nil && pt.ledgerSeen >= started {
			continue
		}
		pt := c.parts[key]
		if pt == nil {
			pt = c.part(key)
			pt.parked = e
			c.reassign([]string{key})
		}
		pt.parked = e
		if !pt.mine {
			continue
		}
		switch pt.state {
		case pWatched, pContested, pBackoff:
			if e.Request != nil {
				pt.checkLedger = true
				c.activate(pt, false)
				continue
			}
			c.setState(pt, pParked)
		case pParked:
			if e.Request != nil {
				pt.checkLedger = true
				c.activate(pt, false)
			}
		}
	}
	// Parked here but no longer in the ledger: resolved by someone else
	// (or the entry was deleted): process the partition again.
	for key, pt := range c.parts {
		if _, ok := parked[key]; ok || pt.parked == nil || pt.ledgerSeen >= started {
			continue
		}
		pt.parked = nil
		if pt.mine && pt.state == pParked {
			pt.checkLedger = true
			c.activate(pt, false)
		}
	}
}
