package repair

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// UnknownSubscriptionError is PlanParked's answer to a filter naming a
// subscription that selects nothing and has left no trace in Redis (a
// typo is the likely cause): it never parked an entry, is no consumer
// group, and saved no Kafka checkpoint (inspect.SubscriptionKnown, the
// rule `parked ls --subscription` follows too: decision 0030). It
// unwraps to inspect.ErrNotFound.
type UnknownSubscriptionError struct {
	Subscription string
	// Known are the subscriptions the ledger has had entries of, sorted.
	Known []string
}

func (e *UnknownSubscriptionError) Error() string {
	known := "none"
	if len(e.Known) > 0 {
		known = strings.Join(e.Known, ", ")
	}
	return fmt.Sprintf("repair: subscription %q not found: it never parked an entry, is no consumer group and saved no Kafka checkpoint (the ledger knows: %s)", e.Subscription, known)
}

func (e *UnknownSubscriptionError) Unwrap() error { return inspect.ErrNotFound }

func (r *Repairer) planParked(ctx context.Context, req ParkedRequest) (*Plan, error) {
	const op = "plan parked"
	if r.cfg.ledger == nil {
		return nil, errNoLedger
	}
	if req.Action != ActionRetry && req.Action != ActionSkip {
		return nil, &broker.InvalidArgumentError{Op: op, Arg: "action", Value: fmt.Sprintf("%q", req.Action), Reason: `want "retry" or "skip"`}
	}
	if req.Action == ActionSkip && req.Reason == "" {
		return nil, &broker.InvalidArgumentError{Op: op, Arg: "reason", Value: `""`, Reason: "a skip needs a reason"}
	}
	if req.Max < 0 {
		return nil, &broker.InvalidArgumentError{Op: op, Arg: "max", Value: fmt.Sprint(req.Max), Reason: "must not be negative"}
	}
	id, err := newPlanID()
	if err != nil {
		return nil, err
	}
	plan := r.newPlan()
	plan.ID = id
	if !req.All {
		if req.Subscription == "" || req.Aggregate == "" {
			return nil, &broker.InvalidArgumentError{Op: op, Arg: "subscription and aggregate", Value: `""`, Reason: "name one entry or ask for all"}
		}
		p, err := r.cfg.ledger.GetParked(ctx, req.Subscription, req.Partition, req.Aggregate)
		if err != nil {
			return nil, err
		}
		plan.Items = append(plan.Items, parkedItem(req, p))
		return plan, nil
	}
	// Subscription, Aggregate and Partition narrow All as the filter's
	// fields of the same names do.
	spec := req.Filter
	for _, v := range []struct {
		from string
		to   *string
	}{
		{req.Subscription, &spec.Subscription}, {req.Aggregate, &spec.Aggregate}, {req.Partition, &spec.Partition},
	} {
		if *v.to == "" {
			*v.to = v.from
		}
	}
	f, err := spec.Compile()
	if err != nil {
		return nil, err
	}
	sel, err := r.inspect.SelectParked(ctx, f)
	if err != nil {
		return nil, err
	}
	// Selecting nothing, a subscription is either known with nothing to
	// retry now (an empty plan) or a typo: told apart as parked ls tells
	// them, only once the selection came back empty.
	if sub := spec.Subscription; sub != "" && len(sel.Entries) == 0 {
		if err := r.requireSubscription(ctx, sub); err != nil {
			return nil, err
		}
	}
	entries := sel.Entries
	if req.Max > 0 && len(entries) > req.Max {
		entries = entries[:req.Max]
	}
	plan.Selection = &Selection{Count: len(entries), Matched: len(sel.Entries), Max: req.Max, Filter: nonEmpty(spec.String()), At: output.Timestamp(sel.Now)}
	for _, p := range entries {
		plan.Items = append(plan.Items, parkedItem(req, p))
	}
	return plan, nil
}

// requireSubscription is an *UnknownSubscriptionError unless sub has left
// a trace in Redis (inspect.SubscriptionKnown).
func (r *Repairer) requireSubscription(ctx context.Context, sub string) error {
	if known, err := r.inspect.SubscriptionKnown(ctx, sub); known || err != nil {
		return err
	}
	ledger, err := r.inspect.ParkedSubscriptions(ctx)
	if err != nil {
		return err
	}
	return &UnknownSubscriptionError{Subscription: sub, Known: ledger}
}

// newPlanID returns 16 random bytes in hex: a plan's ID, the token its
// ledger requests carry.
func newPlanID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("repair: plan id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// validPlanID reports whether id can be a ledger request token.
func validPlanID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func parkedItem(req ParkedRequest, p ledger.Parked) Item {
	pin := ledger.PinOf(p)
	st := &ParkedState{
		Status: string(p.Status), Position: p.Position, Attempts: p.Attempts, Generation: p.Generation,
		Request: nonEmpty(string(pin.Request)), Error: p.Error, ParkedAt: output.TimestampOrNull(p.ParkedAt),
	}
	it := Item{
		Action:       req.Action,
		Target:       Target{Subscription: p.Subscription, Aggregate: p.Aggregate, Category: p.Category, Key: redisKey(p), Partition: kafkaPartition(p)},
		Params:       Params{By: req.By},
		Precondition: Precondition{Parked: st},
	}
	if req.Action == ActionSkip {
		it.Params.Reason = req.Reason
	}
	switch {
	case req.Action == ActionRetry && p.Status == ledger.StatusUnrecoverable:
		it.Reason = fmt.Sprintf("the records at %s are no longer retained: only a skip resolves it", p.Position)
	case p.Request != nil && p.Request.Action == ledger.Action(req.Action):
		it.Result = ResultSkipped
		it.Reason = fmt.Sprintf("a %s was already requested at %s", req.Action, p.Request.RequestedAt.UTC().Format("2006-01-02T15:04:05Z"))
	case req.Action == ActionRetry:
		it.Allowed = true
		it.Reason = fmt.Sprintf("ask the owner to handle %s again from %s (%d attempts so far)", p.Aggregate, p.Position, p.Attempts)
	default:
		it.Allowed = true
		it.Reason = fmt.Sprintf("ask the owner to skip the record at %s of %s", p.Position, p.Aggregate)
	}
	return it
}

func kafkaPartition(p ledger.Parked) string {
	if p.Source == source.Kafka {
		return p.Partition
	}
	return ""
}

func redisKey(p ledger.Parked) string {
	if p.Source == source.Redis {
		return p.Partition
	}
	return ""
}

// pinOf is the ledger.Pin of a planned entry.
func pinOf(st *ParkedState) ledger.Pin {
	return ledger.Pin{
		Position: st.Position, Attempts: st.Attempts, Generation: st.Generation,
		Status: ledger.Status(st.Status), Request: ledger.Action(str(st.Request)),
	}
}

// applyParked records the request in the ledger; the owner acts on it
// under its own fence. With a plan id and a ledger that pins requests
// (ledger.PinnedRequester), the request is recorded in one atomic
// step only on the entry state the plan saw, with the plan id as its
// token, so that an entry an earlier run of the plan requested is
// recognised (ResultDone) and never requested twice; see doc.go.
// Otherwise (a plan file from before plan ids) the entry is re-read and
// its position compared first.
func (r *Repairer) applyParked(ctx context.Context, planID string, it *Item) error {
	if r.cfg.ledger == nil {
		return errNoLedger
	}
	t, planned := it.Target, it.Precondition.Parked
	if planned == nil {
		return fmt.Errorf("%w: %s item without a planned ledger entry", ErrInvalidPlan, it.Action)
	}
	pr, pinned := r.cfg.ledger.(ledger.PinnedRequester)
	var err error
	switch {
	case pinned && planID != "":
		err = pr.RequestPinned(ctx, ledger.PinnedRequest{
			Action: ledger.Action(it.Action), Subscription: t.Subscription, Partition: t.Partition, Aggregate: t.Aggregate,
			Reason: it.Params.Reason, By: it.Params.By, Pin: pinOf(planned), Token: planID,
		})
	default:
		now, gerr := r.cfg.ledger.GetParked(ctx, t.Subscription, t.Partition, t.Aggregate)
		switch {
		case errors.Is(gerr, ledger.ErrNotParked):
			err = gerr
		case gerr != nil:
			return gerr
		case now.Position != planned.Position:
			it.Result, it.Detail = ResultConflict, fmt.Sprintf("the entry is now parked at %s, the plan saw %s", now.Position, planned.Position)
			return nil
		case it.Action == ActionRetry:
			err = r.cfg.ledger.RequestRetry(ctx, t.Subscription, t.Partition, t.Aggregate, it.Params.By)
		default:
			err = r.cfg.ledger.RequestSkip(ctx, t.Subscription, t.Partition, t.Aggregate, it.Params.Reason, it.Params.By)
		}
	}
	var done *ledger.AlreadyRequestedError
	var changed *ledger.ParkChangedError
	switch {
	case errors.As(err, &done):
		it.Result, it.Detail = ResultDone, fmt.Sprintf("%s requested at %s by an earlier run of this plan", done.Action, done.At.UTC().Format(time.RFC3339))
	case errors.As(err, &changed):
		it.Result, it.Detail = ResultConflict, fmt.Sprintf("the entry is now %s, the plan saw %s", ledger.PinOf(changed.Now), changed.Pin)
	case errors.Is(err, ledger.ErrNotParked):
		it.Result, it.Detail = ResultConflict, "the entry was resolved since the plan"
	case errors.Is(err, ledger.ErrUnrecoverable):
		it.Result, it.Detail = ResultRefused, "the entry became unrecoverable: only a skip resolves it"
	case err != nil:
		return err
	default:
		it.Result, it.Detail = ResultApplied, fmt.Sprintf("%s requested; the partition's owner acts on it", it.Action)
	}
	return nil
}

// nonEmpty is s, or nil for "": a JSON value that is null when there is
// none (docs/cli.md: unknown or absent values are null, never "").
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
