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
