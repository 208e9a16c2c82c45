package testenv_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/testenv"
)

// recorder is a testing.TB whose Fatalf records the message and ends the
// goroutine, as the real one does.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls Eventually with r on a goroutine of its own (Fatalf ends it)
// and returns when it has.
func (r *recorder) run(timeout time.Duration, what string, check func() (bool, string)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		testenv.Eventually(r, timeout, what, check)
	}()
	<-done
}

// A condition that comes true ends the wait without failing, having
// been checked until then and not after.
func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	r := &recorder{TB: t}
	calls := 0
	r.run(10*time.Second, "the third call", func() (bool, string) {
		calls++
		return calls == 3, fmt.Sprintf("call %d", calls)
	})
	if r.failed != "" {
		t.Fatalf("failed: %s", r.failed)
	}
	if calls != 3 {
		t.Fatalf("check called %d times, want 3 (stop at the first ok)", calls)
	}
}

// A condition that never holds fails the test after the timeout, naming
// what was awaited and the state the last check described; the check
// runs once more at the timeout.
func TestEventuallyFailsWithTheLastState(t *testing.T) {
	r := &recorder{TB: t}
	start := time.Now()
	var calls int
	var lastAt time.Time
	r.run(100*time.Millisecond, "the queue to drain", func() (bool, string) {
		calls++
		lastAt = time.Now()
		return false, fmt.Sprintf("%d left", 10-calls)
	})
	if r.failed == "" {
		t.Fatal("Eventually returned without failing")
	}
	want := fmt.Sprintf("timed out after 100ms waiting for the queue to drain; last seen: %d left", 10-calls)
	if r.failed != want {
		t.Fatalf("failure %q, want %q", r.failed, want)
	}
	if lastAt.Sub(start) < 100*time.Millisecond {
		t.Fatalf("last check %s after the start, want one at or after the 100ms timeout", lastAt.Sub(start))
	}
	if calls < 2 {
		t.Fatalf("check called %d times: want one at the start and one at the timeout at least", calls)
	}
}

// EventuallyEvery keeps to its interval: never more often (a sleep is at
// least as long as asked), with the first check at once and the last at
// the timeout.
func TestEventuallyEveryKeepsItsInterval(t *testing.T) {
	r := &recorder{TB: t}
	calls := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		testenv.EventuallyEvery(r, 100*time.Millisecond, 40*time.Millisecond, "never", func() (bool, string) {
			calls++
			return false, ""
		})
	}()
	<-done
	if r.failed == "" {
		t.Fatal("EventuallyEvery returned without failing")
	}
	// At 0, 40, 80 and 100ms at most; at the start and the timeout at least.
	if calls < 2 || calls > 4 {
		t.Fatalf("check called %d times in 100ms at 40ms intervals, want 2 to 4", calls)
	}
}

// Without a state, the failure says what was awaited alone.
func TestEventuallyFailsWithoutAState(t *testing.T) {
	r := &recorder{TB: t}
	r.run(time.Millisecond, "nothing", func() (bool, string) { return false, "" })
	if want := "timed out after 1ms waiting for nothing"; r.failed != want || strings.Contains(r.failed, "last seen") {
		t.Fatalf("failure %q, want %q", r.failed, want)
	}
}

// Closed holds once the channel is closed, whatever it still buffered.
func TestClosed(t *testing.T) {
	ch := make(chan int, 2)
	ch <- 1
	check := testenv.Closed(ch)
	if ok, state := check(); ok || state != "still open" {
		t.Fatalf("open channel: %v %q", ok, state)
	}
	ch <- 2
	close(ch)
	if ok, _ := check(); !ok {
		t.Fatal("a closed channel holding a value is not seen closed")
	}
}

// GoroutinesAtMost fails while a goroutine started after the count runs,
// showing its stack, and holds once it has ended.
func TestGoroutinesAtMost(t *testing.T) {
	before := runtime.NumGoroutine()
	release := make(chan struct{})
	go func() { <-release }()
	check := testenv.GoroutinesAtMost(before)
	if ok, state := check(); ok || !strings.Contains(state, "created by github.com/protctl/protctl/internal/testenv_test.TestGoroutinesAtMost") {
		t.Fatalf("with a goroutine more: %v, state without its stack:\n%s", ok, state)
	}
	close(release)
	testenv.Eventually(t, 10*time.Second, "the goroutine to end", check)
}
