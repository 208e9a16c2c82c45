package ledger

import (
	"context"
	"fmt"
	"time"
)

// Pin is the part of a ledger entry an operator's request was
// decided on: a pinned request is recorded only while the entry still
// has all of it. A new park of the same aggregate (after a failed retry,
// attempts grow; after a skip, the position moves), a request by someone
// else (the status or the request changes), or a new owner's park (the
// generation changes) each break the pin.
type Pin struct {
	Position   string
	Attempts   int
	Generation int64
	Status     Status
	// Request is the action of the request the entry held; "" for none.
	Request Action
}

// PinOf returns the pin of p as read.
func PinOf(p Parked) Pin {
	pin := Pin{Position: p.Position, Attempts: p.Attempts, Generation: p.Generation, Status: p.Status}
	if p.Request != nil {
		pin.Request = p.Request.Action
	}
	return pin
}

// String is "parked at 1-0 (3 attempts, generation 7)", with the pending
// request when there is one.
func (p Pin) String() string {
	s := fmt.Sprintf("%s at %s (%d attempts, generation %d)", p.Status, p.Position, p.Attempts, p.Generation)
	if p.Request != "" {
		s += ", " + string(p.Request) + " requested"
	}
	return s
}

// PinnedRequest is an operator's retry or skip of one entry, recorded
// only on the entry's state it was decided on (Pin) and at most once per
// Token.
type PinnedRequest struct {
	Action       Action // ActionRetry or ActionSkip
	Subscription string
	// Partition names the entry as in GetParked; "" names the
	// aggregate's only entry.
	Partition string
	Aggregate string
	Reason    string // recorded with a skip
	By        string // the operator
	// Pin is the entry's state the request was decided on.
	Pin Pin
	// Token names the request: 1 to 64 of [A-Za-z0-9._-]. The store
	// remembers, for a bounded time (see the store's documentation), that
	// a request with this token was recorded on the entry, even after the
	// owner resolved or re-parked it, so that repeating the call (a
	// resumed plan) records nothing twice. The token is also kept in the
	// entry's Request.
	Token string
}

// SkipReason is the reason the request records: r.Reason for a skip, ""
// for a retry (which records none).
func (r PinnedRequest) SkipReason() string {
	if r.Action == ActionSkip {
		return r.Reason
	}
	return ""
}

// AlreadyRequestedError is RequestPinned's answer to a request whose
// token was recorded on the entry before: nothing was changed now.
type AlreadyRequestedError struct {
	Subscription, Partition, Aggregate string
	Token                              string
	// Action, By and At are those of the earlier request (At is the
	// store's clock).
	Action Action
	By     string
	At     time.Time
}

func (e *AlreadyRequestedError) Error() string {
	return fmt.Sprintf("runtime: %q of subscription %q: a %s with token %s was recorded at %s",
		e.Aggregate, e.Subscription, e.Action, e.Token, e.At.UTC().Format(time.RFC3339))
}

func (e *AlreadyRequestedError) Unwrap() error { return ErrAlreadyRequested }

// ParkChangedError is RequestPinned's answer when the entry no longer
// matches the pin: nothing was changed.
type ParkChangedError struct {
	Subscription, Partition, Aggregate string
	Pin                                Pin
	// Now is the entry as the store found it.
	Now Parked
}

func (e *ParkChangedError) Error() string {
	return fmt.Sprintf("runtime: %q of subscription %q is now %s, the request was decided on %s",
		e.Aggregate, e.Subscription, PinOf(e.Now), e.Pin)
}

func (e *ParkChangedError) Unwrap() error { return ErrParkChanged }

// PinnedRequester is an optional capability of a Ledger (found by
// type assertion): requests pinned to the state an operator saw, for
// plans that are applied later, paced, and possibly resumed after an
// interruption. redisstore.Store and memstore.Store implement it.
type PinnedRequester interface {
	// RequestPinned records r on its entry in one atomic step that
	// checks, in this order:
	//
	//  1. a request with r.Token was recorded on the entry before (also
	//     when the entry has since been resolved or parked again):
	//     *AlreadyRequestedError, nothing changed;
	//  2. the entry exists: ErrNotParked otherwise (ErrAmbiguousParked
	//     for a partition "" that names several);
	//  3. the entry matches r.Pin: *ParkChangedError otherwise;
	//  4. a retry of an unrecoverable entry: ErrUnrecoverable.
	//
	// Then it sets the request (with r.Token) as RequestRetry or
	// RequestSkip would, remembers r.Token for the entry, and signals
	// the subscription's watchers. It is safe for concurrent use; of two
	// concurrent calls with one token, one records and the other gets
	// *AlreadyRequestedError.
	RequestPinned(ctx context.Context, r PinnedRequest) error
}
