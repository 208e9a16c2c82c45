package present

import (
	"strconv"
	"strings"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
)

// Cell conventions of every table and detail view: "-" stands for none
// (JSON null for what is absent or not applicable), and Unknown ("?")
// for what Redis could not tell (JSON null for a value that could not be
// read: a key of the wrong type, entries deleted from a lane's middle).
// The values are not escaped: the CLI's printer and the dashboard's
// tables escape what they print.

// Unknown is the cell of a value that could not be read.
const Unknown = "?"

// Dash is s, or "-" when s is empty.
func Dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Str is *s, or "-" when s is nil or empty.
func Str(s *string) string {
	if s == nil {
		return "-"
	}
	return Dash(*s)
}

// Int is *v in decimal, or "-" when v is nil.
func Int(v *int64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatInt(*v, 10)
}

// Duration is a count of milliseconds (the *Ms fields) as a short
// duration: "54s", "3m", "1h2m".
func Duration(ms int64) string {
	return output.HumanDuration(time.Duration(ms) * time.Millisecond)
}

// Ms is Duration(*ms), or "-" when ms is nil.
func Ms(ms *int64) string {
	if ms == nil {
		return "-"
	}
	return Duration(*ms)
}

// YesNo is "yes" or "no".
func YesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// Bool is YesNo(*b), or "-" when b is nil (unknown).
func Bool(b *bool) string {
	if b == nil {
		return "-"
	}
	return YesNo(*b)
}

// List joins s with commas, or is "-" when s is empty.
func List(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}

// Plural is one when n is 1, else many.
func Plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Lanes is a partition's lanes with their lengths, "main:5 backfill:4"
// (a main lane without a key is "main:missing", one that could not be
// read "main:?"), or "-" without lanes.
func Lanes(lanes []inspect.Lane) string {
	parts := make([]string, 0, len(lanes))
	for _, l := range lanes {
		if !l.LengthKnown() {
			parts = append(parts, l.Name+":"+Unknown)
			continue
		}
		if !l.Exists {
			parts = append(parts, l.Name+":missing")
			continue
		}
		parts = append(parts, l.Name+":"+strconv.FormatInt(l.Length, 10))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// ShellQuote quotes s for a command line an operator copies and pastes,
// only when it needs quoting.
func ShellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`!*?[]{}()<>|&;#~") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Length is a partition's length over its lanes, or Unknown when a lane
// could not be read.
func Length(p *inspect.Partition) string {
	if !p.LengthKnown() {
		return Unknown
	}
	return strconv.FormatInt(p.Length, 10)
}

// LeaseState is a lease state's word, or Unknown (inspect.LeaseUnknown)
// when the lease or generation key could not be read.
func LeaseState(s inspect.LeaseState) string {
	if s == inspect.LeaseUnknown {
		return Unknown
	}
	return string(s)
}

// Generation is a group's generation counter, "-" when it has none
// (never leased), or Unknown when the key could not be read.
func Generation(g *inspect.Group) string {
	if !g.GenerationKnown() {
		return Unknown
	}
	return Int(g.Generation)
}
