package nodeconfig

import (
	"fmt"
	"strings"
)

// Problem is one thing wrong with a config: the field's path
// (subscriptions[1].handler), its line (0 when unknown) and what is wrong.
type Problem struct {
	Field string
	Line  int
	Msg   string

	// meant is the field a misspelt one probably is (the decoder's
	// suggestion), whose validation problems would repeat this one.
	meant string
}

func (p Problem) String() string {
	if p.Field == "" {
		return p.Msg
	}
	return p.Field + ": " + p.Msg
}

// Error is a config that cannot be used. Its message has one line per
// problem, "file:line: path: message", in file order (Lines).
type Error struct {
	File     string
	Problems []Problem
}

func (e *Error) Error() string { return strings.Join(e.Lines(), "\n") }

// Lines are the problems, one line each, "file:line: path: message"; a
// line break inside one (a field name read from the file) is written \n,
// so that each problem stays on its own line.
func (e *Error) Lines() []string {
	out := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		var b strings.Builder
		b.WriteString(e.File)
		if p.Line > 0 {
			fmt.Fprintf(&b, ":%d", p.Line)
		}
		b.WriteString(": ")
		b.WriteString(p.String())
		out[i] = strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(b.String())
	}
	return out
}

// Has reports whether a problem is about field (exact path).
func (e *Error) Has(field string) bool {
	for _, p := range e.Problems {
		if p.Field == field {
			return true
		}
	}
	return false
}
