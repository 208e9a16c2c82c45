package clock

import (
	"testing"
	"time"
)

func TestFakeFiresTimersOnlyWhenDue(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	a := f.NewTimer(time.Second)
	b := f.NewTimer(3 * time.Second)
	f.Advance(999 * time.Millisecond)
	select {
	case <-a.C():
		t.Fatal("timer fired before its deadline")
	default:
	}
	f.Advance(time.Millisecond)
	select {
	case got := <-a.C():
		if !got.Equal(time.Unix(1, 0)) {
			t.Fatalf("fired at %v", got)
		}
	default:
		t.Fatal("due timer did not fire")
	}
	if !b.Stop() {
		t.Fatal("stop of an armed timer returned false")
	}
	f.Advance(time.Hour)
	select {
	case <-b.C():
		t.Fatal("stopped timer fired")
	default:
	}
	b.Reset(time.Second)
	if f.Timers() != 1 {
		t.Fatalf("armed timers = %d, want 1", f.Timers())
	}
	f.Advance(time.Second)
	select {
	case <-b.C():
	default:
		t.Fatal("reset timer did not fire")
	}
}

// StepWall moves the wall time only: the readings' Sub and Before follow
// the monotonic reading (as time.Now's do), UnixNano the wall, and
// timers fire by elapsed time.
func TestFakeStepWallKeepsMonotonicTime(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := NewFake(start)
	a := f.Now()
	tm := f.NewTimer(2 * time.Second)
	f.StepWall(-time.Hour)
	b := f.Now()
	if got := b.Sub(a); got != 0 {
		t.Errorf("Sub across a wall step = %v, want 0", got)
	}
	if got := b.UnixNano() - a.UnixNano(); got != int64(-time.Hour) {
		t.Errorf("wall moved by %v, want -1h", time.Duration(got))
	}
	f.Advance(time.Second)
	c := f.Now()
	if !a.Before(c) || c.Sub(a) != time.Second {
		t.Errorf("after Advance(1s): Before=%v Sub=%v, want true, 1s", a.Before(c), c.Sub(a))
	}
	if !c.Round(0).Before(a.Round(0)) {
		t.Error("the wall times (monotonic reading stripped) should still show the step back")
	}
	select {
	case <-tm.C():
		t.Fatal("a wall step fired a timer")
	default:
	}
	f.Advance(time.Second)
	select {
	case <-tm.C():
	default:
		t.Fatal("the timer did not fire after 2s of elapsed time")
	}
	if want := start.Add(-time.Hour + 2*time.Second); !f.Now().Round(0).Equal(want) {
		t.Errorf("wall %v, want %v", f.Now().Round(0), want)
	}
}

// A fake started from time.Now compares with the real clock as time.Now
// does: its reading starts at the real one.
func TestFakeFromNowKeepsTheRealReading(t *testing.T) {
	now := time.Now()
	f := NewFake(now)
	f.Advance(time.Minute)
	if got := f.Now().Sub(now); got != time.Minute {
		t.Fatalf("Sub = %v, want 1m", got)
	}
}
