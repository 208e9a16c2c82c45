package present

import (
	"fmt"
	"strconv"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
)

// Status is a health's status word ("-" when it was not read), as
// partitions ls/show, topics ls/show and the dashboard print it.
func Status(h *inspect.Health) string {
	if h == nil {
		return "-"
	}
	return string(h.Status)
}

// StatusTone colours a status: HALTED, ORPHANED and STALLED bad, LAGGING
// warn, OK good, IDLE and PAUSED muted.
func StatusTone(h *inspect.Health) output.Tone {
	if h == nil {
		return output.ToneNone
	}
	switch h.Status {
	case inspect.StatusHalted, inspect.StatusOrphaned, inspect.StatusStalled:
		return output.ToneBad
	case inspect.StatusLagging:
		return output.ToneWarn
	case inspect.StatusOK:
		return output.ToneGood
	}
	return output.ToneMuted
}

// LagAge is the age of the oldest unhandled entry ("-" when nothing
// waits or it is unknown).
func LagAge(h *inspect.Health) string {
	if h == nil || h.LagSeconds == nil {
		return "-"
	}
	return output.HumanDuration(time.Duration(*h.LagSeconds * float64(time.Second)))
}

// HealthLine is the status with its figures, for partitions show:
// "HALTED: 3 unhandled, oldest 4m0s, head delivered 3 times".
func HealthLine(h *inspect.Health) string {
	if h == nil {
		return "-"
	}
	s := string(h.Status) + ": "
	if h.LagEntries == nil {
		s += "? unhandled"
	} else {
		s += strconv.FormatInt(*h.LagEntries, 10) + " unhandled"
	}
	if h.LagSeconds != nil {
		s += ", oldest " + LagAge(h)
	}
	if h.HeadDeliveries > 0 {
		s += fmt.Sprintf(", head delivered %d times", h.HeadDeliveries)
	}
	if h.ETASeconds != nil {
		s += ", ETA " + output.HumanDuration(time.Duration(*h.ETASeconds*float64(time.Second)))
	}
	return s
}
