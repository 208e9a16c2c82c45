package main

import "time"

// The cells of the operator commands' tables follow internal/present's
// conventions ("-" stands for unknown, JSON null, and for none), which the
// dashboard shares.

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// strOrNull is s, or null (JSON) when empty.
func strOrNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
