package clock

import (
	"fmt"
	"runtime"
	"time"
	"unsafe"
)

// The standard library makes time.Time values with a monotonic reading
// only in time.Now, and Add moves the wall time and the reading
// together, so a fake clock cannot step its wall time back with the
// public API alone. withMono and monoOf set and read the reading
// through time.Time's layout (see the comment on time.Time's wall and
// ext fields): wall holds a hasMonotonic flag, 33 bits of seconds since
// 1885 and 30 bits of nanoseconds; ext the monotonic reading. checkMono
// proves on the first fake clock that the layout is still that one, so a
// Go release that changes it fails every test that uses a fake clock,
// loudly, instead of comparing nonsense.

type timeLayout struct {
	wall uint64
	ext  int64
	loc  *time.Location
}

const (
	hasMonotonic = 1 << 63
	nsecShift    = 30
	secBits      = 33
)

// wallBase is the Unix time of 1885-01-01, where a time with a monotonic
// reading counts its wall seconds from.
var wallBase = time.Date(1885, time.January, 1, 0, 0, 0, 0, time.UTC).Unix()

// withMono returns t (its wall time and location) with the monotonic
// reading mono. Outside 1885-2157 a time cannot carry a reading (as
// time.Add strips it there): t is returned without one.
func withMono(t time.Time, mono int64) time.Time {
	t = t.Round(0)
	sec := t.Unix() - wallBase
	if sec < 0 || sec >= 1<<secBits {
		return t
	}
	l := (*timeLayout)(unsafe.Pointer(&t))
	l.wall = hasMonotonic | uint64(sec)<<nsecShift | uint64(t.Nanosecond())
	l.ext = mono
	return t
}

// monoOf returns t's monotonic reading, if it has one.
func monoOf(t time.Time) (int64, bool) {
	l := (*timeLayout)(unsafe.Pointer(&t))
	if l.wall&hasMonotonic == 0 {
		return 0, false
	}
	return l.ext, true
}

// checkMono panics unless withMono and monoOf agree with the standard
// library's own reading of the values they make.
func checkMono() {
	base := time.Date(2026, time.March, 4, 5, 6, 7, 8, time.UTC)
	a := withMono(base, 1_000)
	b := withMono(base.Add(-time.Hour), 1_000+int64(time.Second)) // wall back, reading on
	now := time.Now()
	nm, nok := monoOf(now)
	am, aok := monoOf(a)
	ok := a.UnixNano() == base.UnixNano() && a.Equal(base) &&
		b.UnixNano() == base.Add(-time.Hour).UnixNano() &&
		b.Sub(a) == time.Second && a.Before(b) && !b.Before(a) &&
		a.Round(0).Equal(base) && aok && am == 1_000 &&
		nok && withMono(now, nm) == now
	if !ok {
		panic(fmt.Sprintf("clock: %s lays time.Time out differently; fix pkg/runtime/clock/mono.go", runtime.Version()))
	}
}
