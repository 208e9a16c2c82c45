package output

import (
	"fmt"
	"time"
)

// TimestampLayout is the RFC 3339 form of every time in protctl's JSON and
// YAML: UTC, millisecond precision (Redis stream ids are milliseconds), a
// fixed width so that strings sort like the times they stand for.
const TimestampLayout = "2006-01-02T15:04:05.000Z07:00"

// Timestamp formats t for a JSON field: RFC 3339 in UTC, e.g.
// "2026-03-01T12:00:05.250Z".
func Timestamp(t time.Time) string { return t.UTC().Format(TimestampLayout) }

// TimestampOrNull is Timestamp for optional fields: nil (JSON null) for the
// zero time, which stands for "unknown".
func TimestampOrNull(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := Timestamp(t)
	return &s
}

// Ms converts a duration to the integer milliseconds of a *Ms JSON field,
// rounding toward zero.
func Ms(d time.Duration) int64 { return d.Milliseconds() }

// HumanDuration is a short, rounded duration for tables: "850ms", "12s",
// "5m3s", "3h4m", "2d3h". Negative durations keep their sign.
func HumanDuration(d time.Duration) string {
	if d < 0 {
		return "-" + HumanDuration(-d)
	}
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		m, s := int(d/time.Minute), int(d%time.Minute/time.Second)
		if s == 0 {
			return fmt.Sprintf("%dm", m)
		}
		return fmt.Sprintf("%dm%ds", m, s)
	case d < 24*time.Hour:
		h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
		if m == 0 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh%dm", h, m)
	default:
		days, h := int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour)
		if h == 0 {
			return fmt.Sprintf("%dd", days)
		}
		return fmt.Sprintf("%dd%dh", days, h)
	}
}

// relativeTime says how far t is from now: "5s ago", "in 3m", "now".
func relativeTime(t, now time.Time) string {
	d := now.Sub(t)
	switch {
	case d > -time.Second && d < time.Second:
		return "now"
	case d > 0:
		return HumanDuration(d.Truncate(time.Second)) + " ago"
	default:
		return "in " + HumanDuration((-d).Truncate(time.Second))
	}
}
