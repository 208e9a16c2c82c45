package testenv

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// Polling intervals of Eventually: the first re-check comes soon (most
// waits end within milliseconds), later ones back off to pollMax so that
// a long wait does not keep a loaded machine, or a server the check
// queries, busy.
const (
	pollFirst = time.Millisecond
	pollMax   = 50 * time.Millisecond
)

// Eventually waits for what a test expects to happen: it calls check
// until check reports ok, and fails t (t.Fatalf) once timeout has passed
// without that, saying what it waited for and the state check last
// described. check returns whether the condition holds and, either way,
// a short description of what it saw ("3 of 5 handled", an error): that
// is what a failure shows, so make it the state that would explain one.
//
//	testenv.Eventually(t, 10*time.Second, "three live members", func() (bool, string) {
//		m, err := store.Members(ctx, service)
//		return err == nil && len(m) == 3, fmt.Sprintf("members %v, err %v", m, err)
//	})
//
// check runs on the calling goroutine, first at once and then with a
// pause that grows from 1 ms to 50 ms, and once more after the timeout
// before failing. It may itself call t.Fatal. Call Eventually from the
// test's goroutine (t.Fatalf must be), never to pace work that has no
// state to poll: a wait that cannot name the state it waits for is a
// sleep in disguise.
func Eventually(t testing.TB, timeout time.Duration, what string, check func() (ok bool, state string)) {
	t.Helper()
	poll(t, timeout, 0, what, check)
}

// EventuallyEvery is Eventually with check called every interval instead
// of at a growing pace: for a check whose cost is part of what the test
// measures (a benchmark counting a server's commands while it waits), so
// that the load it adds stays what the author chose.
func EventuallyEvery(t testing.TB, timeout, interval time.Duration, what string, check func() (ok bool, state string)) {
	t.Helper()
	poll(t, timeout, max(interval, time.Microsecond), what, check)
}

// poll is Eventually's loop; every 0 means the growing pace.
func poll(t testing.TB, timeout, every time.Duration, what string, check func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	pause := pollFirst
	if every > 0 {
		pause = every
	}
	for {
		ok, state := check()
		if ok {
			return
		}
		if !time.Now().Before(deadline) {
			if state == "" {
				t.Fatalf("timed out after %s waiting for %s", timeout, what)
			}
			t.Fatalf("timed out after %s waiting for %s; last seen: %s", timeout, what, state)
			return
		}
		time.Sleep(min(pause, time.Until(deadline)))
		if every == 0 {
			pause = min(2*pause, pollMax)
		}
	}
}

// Closed is an Eventually check that ch has been closed. It drains what
// ch holds on each call, so a buffered channel closes for it too.
func Closed[T any](ch <-chan T) func() (bool, string) {
	return func() (bool, string) {
		for {
			select {
			case _, ok := <-ch:
				if !ok {
					return true, ""
				}
			default:
				return false, "still open"
			}
		}
	}
}

// GoroutinesAtMost is an Eventually check that the process runs at most
// n goroutines (a count taken before something was started): a leak
// check. Its state is the count and every goroutine's stack.
func GoroutinesAtMost(n int) func() (bool, string) {
	return func() (bool, string) {
		now := runtime.NumGoroutine()
		if now <= n {
			return true, ""
		}
		buf := make([]byte, 1<<20)
		return false, fmt.Sprintf("%d goroutines, at most %d wanted:\n%s", now, n, buf[:runtime.Stack(buf, true)])
	}
}
