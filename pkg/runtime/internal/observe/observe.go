// Package observe calls a runtime.Observer's hooks for the engines: each
// function is nil-safe (a nil Observer or hook observes nothing), so a
// call site stays one line. It also holds the subscriptions' counters.
package observe

import (
	"sync/atomic"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

// Lease calls o.OnLease.
func Lease(o *runtime.Observer, e runtime.LeaseEvent) {
	if o != nil && o.OnLease != nil {
		o.OnLease(e)
	}
}

// Handled calls o.OnHandled.
func Handled(o *runtime.Observer, e runtime.HandledEvent) {
	if o != nil && o.OnHandled != nil {
		o.OnHandled(e)
	}
}

// Parked calls o.OnParked.
func Parked(o *runtime.Observer, p ledger.Parked) {
	if o != nil && o.OnParked != nil {
		o.OnParked(p)
	}
}

// Resolved calls o.OnResolved.
func Resolved(o *runtime.Observer, e runtime.ResolvedEvent) {
	if o != nil && o.OnResolved != nil {
		o.OnResolved(e)
	}
}

// Missing calls o.OnMissing.
func Missing(o *runtime.Observer, e runtime.MissingEvent) {
	if o != nil && o.OnMissing != nil {
		o.OnMissing(e)
	}
}

// Pause calls o.OnPause.
func Pause(o *runtime.Observer, e runtime.PauseEvent) {
	if o != nil && o.OnPause != nil {
		o.OnPause(e)
	}
}

// Assignment calls o.OnAssignment.
func Assignment(o *runtime.Observer, e runtime.AssignmentEvent) {
	if o != nil && o.OnAssignment != nil {
		o.OnAssignment(e)
	}
}

// Fatal calls o.OnFatal.
func Fatal(o *runtime.Observer, e runtime.FatalEvent) {
	if o != nil && o.OnFatal != nil {
		o.OnFatal(e)
	}
}

// Error calls o.OnError.
func Error(o *runtime.Observer, e runtime.ErrorEvent) {
	if o != nil && o.OnError != nil {
		o.OnError(e)
	}
}

// Counter is one monotonically increasing or gauge value of a
// subscription, read by Status without locks.
type Counter struct{ atomic.Int64 }
