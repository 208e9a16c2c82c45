// Package clock abstracts time for lease and ownership code, so tests move
// time forward instead of sleeping to wait for a TTL.
package clock

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Clock tells the time and makes timers. Implementations are safe for
// concurrent use.
type Clock interface {
	Now() time.Time
	// NewTimer fires once, d from now.
	NewTimer(d time.Duration) Timer
}

// Timer is a stoppable one-shot timer, like *time.Timer.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
	// Reset re-arms the timer to fire d from now.
	Reset(d time.Duration)
}

// System is the real clock.
func System() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

type sysTimer struct{ t *time.Timer }

func (s sysTimer) C() <-chan time.Time   { return s.t.C }
func (s sysTimer) Stop() bool            { return s.t.Stop() }
func (s sysTimer) Reset(d time.Duration) { s.t.Reset(d) }

// Fake is a manual clock for tests: time moves only with Advance, and
// timers due by then fire (in deadline order) during Advance.
//
// Like time.Now, its Now carries a monotonic reading besides the wall
// time, so Sub, Before and After between its readings measure elapsed
// time, and StepWall moves the wall time alone (an NTP step, an operator
// setting the date) while the monotonic reading and the timers go on:
// code that measures time with UnixNano or a wall-only time sees the
// step, code that uses Sub/Before does not.
type Fake struct {
	mu     sync.Mutex
	wall   time.Time // without a monotonic reading
	mono   int64     // the monotonic reading, in nanoseconds
	timers []*fakeTimer
}

// NewFake returns a fake clock standing at start. Its monotonic reading
// starts at start's own when start has one (a time.Now), so its readings
// compare with the real clock's as time.Now's do; else at zero.
func NewFake(start time.Time) *Fake {
	checkMono()
	mono, _ := monoOf(start)
	return &Fake{wall: start.Round(0), mono: mono}
}

// Now returns the fake time, with its monotonic reading.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nowLocked()
}

func (f *Fake) nowLocked() time.Time { return withMono(f.wall, f.mono) }

// NewTimer makes a timer that fires when Advance passes its deadline.
func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{clock: f, c: make(chan time.Time, 1), at: f.mono + int64(d), armed: true}
	f.timers = append(f.timers, t)
	if d <= 0 {
		f.fireLocked()
	}
	return t
}

// Advance moves the clock forward by d (wall and monotonic reading) and
// fires the timers now due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wall = f.wall.Add(d)
	f.mono += int64(d)
	f.fireLocked()
}

// StepWall moves the wall time by d (back when negative) and leaves the
// monotonic reading, and so every timer, where it is: what a host whose
// clock is set does to time.Now. No timer fires.
func (f *Fake) StepWall(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wall = f.wall.Add(d)
}

// Timers returns how many timers are armed: tests wait for a goroutine to
// arm its timer before advancing past it.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, t := range f.timers {
		if t.armed {
			n++
		}
	}
	return n
}

func (f *Fake) fireLocked() {
	sort.SliceStable(f.timers, func(i, j int) bool { return f.timers[i].at < f.timers[j].at })
	kept := f.timers[:0]
	now := f.nowLocked()
	for _, t := range f.timers {
		if t.armed && t.at <= f.mono {
			t.armed = false
			select {
			case t.c <- now:
			default:
			}
			continue
		}
		if t.armed {
			kept = append(kept, t)
		}
	}
	f.timers = kept
}

type fakeTimer struct {
	clock *Fake
	c     chan time.Time
	at    int64 // the monotonic reading it fires at
	armed bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	was := t.armed
	t.armed = false
	return was
}

func (t *fakeTimer) Reset(d time.Duration) {
	f := t.clock
	f.mu.Lock()
	defer f.mu.Unlock()
	t.at = f.mono + int64(d)
	if !t.armed {
		t.armed = true
		f.timers = append(f.timers, t)
	}
	if d <= 0 {
		f.fireLocked()
	}
}

// Sleep waits d on c; false when ctx ended first.
func Sleep(ctx context.Context, c Clock, d time.Duration) bool {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
