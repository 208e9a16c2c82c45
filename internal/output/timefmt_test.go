package output

import (
	"testing"
	"time"
)

func TestTimestampIsUTCWithMilliseconds(t *testing.T) {
	at := time.Date(2026, 3, 1, 13, 0, 5, 250_000_000, time.FixedZone("CET", 3600))
	if got := Timestamp(at); got != "2026-03-01T12:00:05.250Z" {
		t.Fatalf("Timestamp = %q", got)
	}
	if TimestampOrNull(time.Time{}) != nil {
		t.Fatal("the zero time is unknown: null")
	}
	if got := TimestampOrNull(at); got == nil || *got != "2026-03-01T12:00:05.250Z" {
		t.Fatalf("TimestampOrNull = %v", got)
	}
	if Ms(1500*time.Millisecond+999*time.Microsecond) != 1500 {
		t.Fatal("Ms must truncate to whole milliseconds")
	}
}

func TestHumanDuration(t *testing.T) {
	cases := map[time.Duration]string{
		850 * time.Millisecond:           "850ms",
		12 * time.Second:                 "12s",
		5*time.Minute + 3*time.Second:    "5m3s",
		5 * time.Minute:                  "5m",
		3*time.Hour + 4*time.Minute:      "3h4m",
		2*24*time.Hour + 3*time.Hour + 5: "2d3h",
		-(12 * time.Second):              "-12s",
		48 * time.Hour:                   "2d",
	}
	for d, want := range cases {
		if got := HumanDuration(d); got != want {
			t.Errorf("HumanDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
