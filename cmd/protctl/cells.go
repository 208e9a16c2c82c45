package main

import (
	"strconv"
	"time"

	"github.com/protctl/protctl/internal/output"
)

// Cell formatting shared by the operator commands' tables: "-" stands for
// unknown (JSON null) and for "none".

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// msCell is a *Ms field as a short duration.
func msCell(ms *int64) string {
	if ms == nil {
		return "-"
	}
	return output.HumanDuration(msDuration(*ms))
}

func intCell(v *int64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatInt(*v, 10)
}

func strCell(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

func boolCell(b *bool) string {
	if b == nil {
		return "-"
	}
	return yesNo(*b)
}

// strOrNull is s, or null (JSON) when empty.
func strOrNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
