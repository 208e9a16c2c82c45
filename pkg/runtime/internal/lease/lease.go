// Package lease is what both engines do with a fenced lease they hold:
// the trust window (a lease is trusted until the start of its last
// successful renewal plus the window, measured on the monotonic clock),
// the outcome of a renewal, and the causes a worker's context is
// cancelled with when its lease can no longer be trusted.
package lease

import (
	"errors"
	"sync/atomic"
	"time"
)

// Causes a partition worker's context is cancelled with when its lease
// can no longer be trusted. They never reach callers: the worker turns
// them into lease events.
var (
	ErrLost      = errors.New("runtime: lease lost")
	ErrUntrusted = errors.New("runtime: lease not renewed within the trust window")
)

// Deadline is when a lease stops being trusted: the start of the
// last successful renewal (or of the acquire) plus the trust window.
// Measuring from the start of the call is the conservative side: the
// server may have applied the renewal at any moment of the round trip.
//
// It is elapsed time, never wall time: the deadline is kept as the
// nanoseconds from base, a reading of the clock at the acquire, and every
// comparison is a time.Time Sub, which uses the readings' monotonic clock
// (time.Now's carry one, as clock.Fake's do). A Unix time would follow the
// wall clock instead: a wall clock stepped back by more than TTL minus
// the trust window would keep the node calling handlers after the server
// expired the lease and another node took it.
type Deadline struct {
	base  time.Time    // set once (Begin) before the lease is shared
	until atomic.Int64 // nanoseconds after base
}

// Begin sets the deadline of a lease acquired by a call started at from.
// It is called once, before the lease is shared.
func (d *Deadline) Begin(from time.Time, window time.Duration) {
	d.base = from
	d.until.Store(int64(window))
}

// Extend moves the deadline to from+window, never back.
func (d *Deadline) Extend(from time.Time, window time.Duration) {
	until := int64(from.Sub(d.base) + window)
	for {
		cur := d.until.Load()
		if until <= cur || d.until.CompareAndSwap(cur, until) {
			return
		}
	}
}

// Left is the time until the deadline as of now (<= 0: passed).
func (d *Deadline) Left(now time.Time) time.Duration {
	return time.Duration(d.until.Load()) - now.Sub(d.base)
}

// Deadline is the trust deadline as a clock reading (monotonic, as base
// is).
func (d *Deadline) Deadline() time.Time {
	return d.base.Add(time.Duration(d.until.Load()))
}

// Result is what a renewal round learnt about one lease.
type Result int8

const (
	Unknown Result = iota // the call failed: nothing is known
	Renewed
	Refused // the lease no longer holds the token
)
