package topic

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/backoff"
	"github.com/protctl/protctl/pkg/runtime/internal/lease"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// park records the aggregate in the ledger, fenced, before its record
// counts as done; it retries the write until it succeeds or the lease is
// gone.
func (sp *subPart) park(agg string, it *laneItem, herr error, attempts int) bool {
	tp := sp.tp
	t := tp.t
	now := t.clk.Now()
	tp.mu.Lock()
	prev := sp.parked[agg]
	if prev != nil {
		attempts += prev.entry.Attempts
	}
	tp.mu.Unlock()
	e := ledger.Parked{
		Subscription:  sp.sr.cfg.Name,
		Source:        source.Kafka,
		Aggregate:     agg,
		Topic:         t.cfg.Topic,
		Partition:     tp.pstr,
		Position:      strconv.FormatInt(it.rec.Offset, 10),
		Error:         ledger.TruncateError(herr.Error()),
		Attempts:      attempts,
		ParkedAt:      now,
		LastAttemptAt: now,
		Status:        ledger.StatusParked,
		Owner:         t.node,
		Generation:    tp.lease.gen,
	}
	// The park is known here before the write lands, and an operator's
	// retry or skip waits until the worker settled it (aggLane.parking):
	// one that acted between the write and the state here was undone by
	// it (the retry's records dropped, the entry left "retrying" with
	// nothing under way; or the entry resolved by a skip and the
	// aggregate parked here again, its later records skipped with nothing
	// covering them). No poll's list may judge the park before the write
	// returned (seen).
	st := &parkState{entry: e, seen: math.MaxInt64}
	tp.mu.Lock()
	sp.parked[agg] = st
	if ln := sp.lanes[agg]; ln != nil && ln.parking == nil {
		ln.parking = make(chan struct{})
	}
	tp.mu.Unlock()
	err := sp.fenced(func(ctx context.Context) error { return t.cfg.Ledger.Park(ctx, tp.lease.fence, e) }, "park")
	// Read after the write returned: see parkState.seen.
	seen := sp.sr.ledgerReads.Load()
	tp.mu.Lock()
	st.seen = seen
	if err != nil && sp.parked[agg] == st {
		// The partition ends (the lease is gone or it is being stopped):
		// the record stays below the checkpoint, for the next owner.
		if prev != nil {
			sp.parked[agg] = prev
		} else {
			delete(sp.parked, agg)
		}
	}
	tp.mu.Unlock()
	if err != nil {
		return false
	}
	sp.sr.c.parked.Add(1)
	t.log.Warn("aggregate parked", "subscription", sp.sr.cfg.Name, "partition", tp.p, "aggregate", agg,
		"offset", it.rec.Offset, "attempts", attempts, "err", herr)
	observe.Parked(t.obs, e)
	return true
}

// fenced runs a fenced store write until it succeeds, retrying transient
// failures with backoff. It gives up (returning the error) when the
// lease is refused (the partition is then lost) or the partition ends.
func (sp *subPart) fenced(write func(ctx context.Context) error, op string) error {
	tp := sp.tp
	t := tp.t
	b := backoff.New(100*time.Millisecond, t.cfg.RenewEvery, t.jit)
	for {
		if tp.lease.lost.Load() {
			return lease.ErrLost
		}
		ctx, cancel := context.WithTimeout(tp.ctx, t.cfg.OpTimeout)
		err := write(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if errors.Is(err, broker.ErrLeaseLost) {
			t.loseLease(tp.lease, lease.ErrLost)
			t.log.Warn("a fenced write was refused: the lease is gone", "op", op, "partition", tp.p, "err", err)
			return err
		}
		if tp.ctx.Err() != nil {
			return err
		}
		t.log.Warn("a fenced write failed; retrying", "op", op, "partition", tp.p, "err", err)
		observe.Error(t.obs, runtime.ErrorEvent{Subscription: t.name, Op: op, Err: err})
		if !t.sleep(tp.ctx, b.Next()) {
			return err
		}
	}
}

// resolveRetry runs after a retry's records were all handled: the entry
// is resolved and the aggregate's later records flow again.
func (sp *subPart) resolveRetry(agg string) bool {
	tp := sp.tp
	t := tp.t
	if err := sp.fenced(func(ctx context.Context) error {
		return t.cfg.Ledger.Resolve(ctx, tp.lease.fence, sp.sr.cfg.Name, agg)
	}, "resolve"); err != nil {
		return false
	}
	tp.mu.Lock()
	st := sp.parked[agg]
	delete(sp.parked, agg)
	tp.mu.Unlock()
	sp.sr.c.resolved.Add(1)
	pos := ""
	if st != nil {
		pos = st.entry.Position
	}
	t.log.Info("parked aggregate retried", "subscription", sp.sr.cfg.Name, "partition", tp.p, "aggregate", agg, "position", pos)
	observe.Resolved(t.obs, runtime.ResolvedEvent{Subscription: sp.sr.cfg.Name, Aggregate: agg, Position: pos, Action: ledger.ActionRetry})
	return true
}

// settledLocked returns agg's park on this partition (nil when none)
// with tp.mu held, once no park of agg is under way: a worker's park is
// settled when the rest of its batch is back in the lane (work), where a
// retry that queues its records ahead of the lane's finds them. It waits
// OpTimeout at most (a park's write is retried until the partition ends),
// then fails, tp.mu not held; so it does when ctx ends first.
func (sp *subPart) settledLocked(ctx context.Context, agg string) (*parkState, error) {
	tp := sp.tp
	var timeout <-chan time.Time
	tp.mu.Lock()
	for {
		ln := sp.lanes[agg]
		if ln == nil || ln.parking == nil {
			return sp.parked[agg], nil
		}
		parking := ln.parking
		tp.mu.Unlock()
		if timeout == nil {
			tm := time.NewTimer(tp.t.cfg.OpTimeout)
			defer tm.Stop()
			timeout = tm.C
		}
		select {
		case <-parking:
		case <-timeout:
			return nil, fmt.Errorf("runtime: %q of %q: %w: it is being parked (the ledger write is retried; try again)",
				agg, sp.sr.cfg.Name, context.DeadlineExceeded)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		tp.mu.Lock()
	}
}

// notParked is the error of an operator's action on entry e of an
// aggregate this node does not know parked here, once no park of it is
// under way (settledLocked). The node took the partition's entries when
// it took the partition, and only the owner parks: e was read before
// this node resolved it (or parked the aggregate again, for a skip).
// Acting on it would make a park state from a stale copy, which a park
// begun meanwhile then lost (its record skipped with no entry).
func (sp *subPart) notParked(action string, e ledger.Parked) error {
	return fmt.Errorf("runtime: %s %q of %q (parked at %s): %w: resolved or parked again since it was read",
		action, e.Aggregate, sp.sr.cfg.Name, e.Position, ledger.ErrNotParked)
}

// act carries out an operator's action on a parked entry of this
// partition, under the partition's fence.
func (sp *subPart) act(ctx context.Context, action ledger.Action, e ledger.Parked) error {
	switch action {
	case ledger.ActionRetry:
		return sp.retry(ctx, e)
	case ledger.ActionSkip:
		return sp.skip(ctx, e)
	}
	return fmt.Errorf("runtime: unknown action %q", action)
}

// retry re-scans the partition from the parked offset for the
// aggregate's records and queues them, in order, ahead of the records of
// it that arrive meanwhile. Records delivered from now on wait in the
// aggregate's lane (hold) instead of being skipped, so the re-scan need
// only cover [parked offset, next at this moment).
func (sp *subPart) retry(ctx context.Context, e ledger.Parked) error {
	tp := sp.tp
	t := tp.t
	agg := e.Aggregate
	st, err := sp.settledLocked(ctx, agg)
	if err != nil {
		return err
	}
	if st == nil {
		tp.mu.Unlock()
		return sp.notParked("retry", e)
	}
	if st.retrying {
		tp.mu.Unlock()
		return nil // already under way
	}
	// The park this node knows: e may have been read before a later one,
	// and re-scanning from its position would hand records again.
	e = st.entry
	from, perr := strconv.ParseInt(e.Position, 10, 64)
	if perr != nil || from < 0 {
		tp.mu.Unlock()
		return fmt.Errorf("runtime: retry %q of %q: bad parked position %q", agg, sp.sr.cfg.Name, e.Position)
	}
	st.retrying = true
	cut := sp.next
	ln := sp.laneLocked(agg)
	ln.hold = true
	tp.mu.Unlock()

	undo := func(unpark bool) {
		tp.mu.Lock()
		st.retrying = false
		if unpark && sp.parked[agg] == st {
			delete(sp.parked, agg)
		}
		sp.releaseHoldLocked(ln)
		tp.mu.Unlock()
	}
	octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
	err = t.cfg.Ledger.SetStatus(octx, tp.lease.fence, sp.sr.cfg.Name, agg, ledger.StatusRetrying)
	cancel()
	switch {
	case errors.Is(err, ledger.ErrNotParked):
		undo(true)
		return err
	case errors.Is(err, broker.ErrLeaseLost):
		t.loseLease(tp.lease, lease.ErrLost)
		undo(false)
		return err
	case err != nil:
		undo(false)
		return err
	}
	var recs []*kgo.Record
	_, err = t.cfg.Source.Scan(ctx, t.cfg.Topic, tp.p, from, cut, func(r *kgo.Record) error {
		if t.aggregateOf(r, tp.pstr) == agg {
			recs = append(recs, r)
		}
		return nil
	})
	if err != nil {
		status := ledger.StatusParked
		if errors.Is(err, kafkasource.ErrOffsetNotRetained) {
			status = ledger.StatusUnrecoverable
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.cfg.OpTimeout)
		serr := t.cfg.Ledger.SetStatus(sctx, tp.lease.fence, sp.sr.cfg.Name, agg, status)
		cancel()
		seen := sp.sr.ledgerReads.Load()
		tp.mu.Lock()
		st.entry.Status = status
		st.seen = max(st.seen, seen)
		tp.mu.Unlock()
		undo(false)
		if status == ledger.StatusUnrecoverable {
			t.log.Error("parked aggregate is unrecoverable: its records are no longer retained; only a skip resolves it",
				"subscription", sp.sr.cfg.Name, "partition", tp.p, "aggregate", agg, "position", from, "err", err)
			if serr != nil {
				return fmt.Errorf("%w: %v (and marking it failed: %v)", ledger.ErrUnrecoverable, err, serr)
			}
			return fmt.Errorf("%w: %v", ledger.ErrUnrecoverable, err)
		}
		return fmt.Errorf("runtime: retry %q of %q: re-scan: %w", agg, sp.sr.cfg.Name, err)
	}
	tp.mu.Lock()
	// The retry's records go ahead of the ones queued meanwhile.
	queued := make([]laneItem, ln.len())
	ln.take(queued, &sp.blocks)
	for _, r := range recs {
		id, idState := t.headerIdentity(r)
		ln.push(laneItem{rec: r, value: r.Value, headers: r.Headers, seq: -1, off: r.Offset, id: id,
			idState: idState, kind: itemRetry, keyed: t.keyAggregate && len(r.Key) > 0}, &sp.blocks)
	}
	ln.push(laneItem{kind: itemResolve}, &sp.blocks)
	for _, it := range queued {
		ln.push(it, &sp.blocks)
	}
	sp.releaseHoldLocked(ln)
	tp.mu.Unlock()
	t.log.Info("retrying parked aggregate", "subscription", sp.sr.cfg.Name, "partition", tp.p, "aggregate", agg,
		"from", from, "records", len(recs))
	return nil
}

// skip resolves a parked entry without handling its records. While the
// entry is being resolved, the aggregate's new records wait in its lane
// (hold) instead of being skipped: once the entry is gone nothing would
// cover them. If the resolve fails they are skipped after all (the entry
// still covers them).
func (sp *subPart) skip(ctx context.Context, e ledger.Parked) error {
	tp := sp.tp
	t := tp.t
	agg := e.Aggregate
	st, err := sp.settledLocked(ctx, agg)
	if err != nil {
		return err
	}
	if st == nil || st.entry.Position != e.Position {
		// A skip drops records: it acts on the entry the operator read,
		// not on a later park of the aggregate.
		tp.mu.Unlock()
		return sp.notParked("skip", e)
	}
	if st.retrying {
		tp.mu.Unlock()
		return fmt.Errorf("runtime: skip %q of %q: a retry is under way", agg, sp.sr.cfg.Name)
	}
	st.retrying = true
	ln := sp.laneLocked(agg)
	ln.hold = true
	tp.mu.Unlock()

	octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
	err = t.cfg.Ledger.Resolve(octx, tp.lease.fence, sp.sr.cfg.Name, agg)
	if err != nil && !errors.Is(err, broker.ErrLeaseLost) {
		// A resolve can fail after the entry went (a store's index
		// update after the delete): then nothing covers the aggregate's
		// records any more, and it must not stay parked here.
		// The resolve may have failed on its deadline: the check gets
		// its own.
		gctx, gcancel := context.WithTimeout(context.WithoutCancel(ctx), t.cfg.OpTimeout)
		if _, gerr := t.cfg.Ledger.GetParked(gctx, sp.sr.cfg.Name, tp.pstr, agg); errors.Is(gerr, ledger.ErrNotParked) {
			err = nil
		}
		gcancel()
	}
	cancel()
	tp.mu.Lock()
	st.retrying = false
	if err == nil && sp.parked[agg] == st {
		delete(sp.parked, agg)
	}
	sp.releaseHoldLocked(ln)
	tp.mu.Unlock()
	if err != nil {
		if errors.Is(err, broker.ErrLeaseLost) {
			t.loseLease(tp.lease, lease.ErrLost)
		}
		return err
	}
	sp.sr.c.resolved.Add(1)
	t.log.Info("parked aggregate skipped", "subscription", sp.sr.cfg.Name, "partition", tp.p, "aggregate", agg, "position", e.Position)
	observe.Resolved(t.obs, runtime.ResolvedEvent{Subscription: sp.sr.cfg.Name, Aggregate: agg, Position: e.Position, Action: ledger.ActionSkip})
	return nil
}

// reconcile applies a re-read of the ledger's entries of this partition,
// from the list numbered listed (Runtime.ledgerReads):
// entries that are gone (deleted by hand) stop holding their aggregate
// back, and known entries take the ledger's view (status, request). Only
// a list that started after this node knew an entry as it is (listed >
// parkState.seen) may do either: an older one may have read the ledger
// before this node's write landed. Entries being retried or skipped are
// left alone. Entries it does not know are not adopted: only the owner
// parks, so such an entry can only be one this node resolved after the
// read, and adopting it would skip records nothing covers.
func (sp *subPart) reconcile(entries []ledger.Parked, listed int64) {
	tp := sp.tp
	tp.mu.Lock()
	defer tp.mu.Unlock()
	in := make(map[string]bool, len(entries))
	for _, e := range entries {
		in[e.Aggregate] = true
		if st := sp.parked[e.Aggregate]; st != nil && !st.retrying && listed > st.seen {
			st.entry = e
		}
	}
	for agg, st := range sp.parked {
		if !in[agg] && !st.retrying && listed > st.seen {
			delete(sp.parked, agg)
		}
	}
}

// Retry asks for the parked aggregate of subscription sub to be handled
// again from its parked offset: the partition is re-scanned from there
// for the aggregate's records, which are handled in order before its
// later ones. When this node holds the aggregate's partition it does so
// itself and returns once the records are queued (ErrUnrecoverable,
// wrapped, when the topic no longer retains the parked offset: the entry
// is then marked unrecoverable and only Skip resolves it). Otherwise it
// records the request in the ledger for whichever node holds (or will
// hold) the partition. An aggregate parked on several partitions (an
// aggregate from a header or a JSON path) has an entry on each: Retry
// acts on every one, and returns their errors joined. ErrNotParked when
// there is no such entry, or when the entry read was resolved before this
// node could act on it. A retry made while the aggregate is being parked
// waits for the park, OpTimeout at most (then it fails: try again).
func (t *Consumer) Retry(ctx context.Context, sub, aggregate string) error {
	return t.operate(ctx, ledger.ActionRetry, sub, aggregate)
}

// Skip resolves the parked aggregate of subscription sub without handling
// its parked records; its later records are handled again. Like Retry it
// acts at once when this node holds the partition and otherwise records
// the request for the owner, on every partition the aggregate is parked
// on. ErrNotParked when there is no such entry, or when the entry read
// was resolved, or the aggregate parked again on a later record, before
// this node could act on it: a skip drops only records the operator saw
// parked (docs/decisions/0055-topic-operator-actions-and-parks.md).
func (t *Consumer) Skip(ctx context.Context, sub, aggregate string) error {
	return t.operate(ctx, ledger.ActionSkip, sub, aggregate)
}

func (t *Consumer) operate(ctx context.Context, action ledger.Action, sub, aggregate string) error {
	sr := t.Subscription(sub)
	if sr == nil {
		return fmt.Errorf("%w: %q on topic %q", ErrUnknownSubscription, sub, t.cfg.Topic)
	}
	t.mu.Lock()
	state := t.state
	t.mu.Unlock()
	if state != runtime.StateRunning {
		return ErrTopicStopped
	}
	entries, err := t.entriesOf(ctx, sub, aggregate)
	if err != nil {
		return err
	}
	// An aggregate parked on several partitions has an entry (a parked
	// head) on each: the action is carried out on every one.
	var errs []error
	for _, e := range entries {
		if err := t.operateOn(ctx, sr, action, e); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// entriesOf reads the entries of aggregate: its only one, or one per
// partition it is parked on. ErrNotParked when there is none.
func (t *Consumer) entriesOf(ctx context.Context, sub, aggregate string) ([]ledger.Parked, error) {
	e, err := t.cfg.Ledger.GetParked(ctx, sub, "", aggregate)
	var amb *ledger.AmbiguousParkedError
	if !errors.As(err, &amb) {
		if err != nil {
			return nil, err
		}
		return []ledger.Parked{e}, nil
	}
	var out []ledger.Parked
	for _, p := range amb.Partitions {
		e, err := t.cfg.Ledger.GetParked(ctx, sub, p, aggregate)
		if errors.Is(err, ledger.ErrNotParked) {
			continue // resolved meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("runtime: %q of %q: %w", aggregate, sub, ledger.ErrNotParked)
	}
	return out, nil
}

// operateOn carries out action on entry e: here when this node holds its
// partition, otherwise by recording the request for the owner.
func (t *Consumer) operateOn(ctx context.Context, sr *Runtime, action ledger.Action, e ledger.Parked) error {
	if e.Source != source.Kafka || e.Topic != t.cfg.Topic {
		return fmt.Errorf("runtime: %s %q of %q: the entry is not of topic %q (source %s, topic %q)",
			action, e.Aggregate, e.Subscription, t.cfg.Topic, e.Source, e.Topic)
	}
	if p, perr := strconv.ParseInt(e.Partition, 10, 32); perr == nil {
		if tp := t.heldPart(int32(p)); tp != nil {
			if err, handled := tp.operate(ctx, sr, action, e); handled {
				return err
			}
		}
	}
	// Not ours (or not any more): the owner acts on the request.
	if action == ledger.ActionRetry {
		return t.cfg.Ledger.RequestRetry(ctx, e.Subscription, e.Partition, e.Aggregate, t.node)
	}
	return t.cfg.Ledger.RequestSkip(ctx, e.Subscription, e.Partition, e.Aggregate, "", t.node)
}
