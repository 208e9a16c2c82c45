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
}

func (p Problem) String() string {
	if p.Field == "" {
		return p.Msg
	}
	return p.Field + ": " + p.Msg
}

// Error is a config that cannot be used. Its message has one line per
// problem, "file:line: path: message", in file order.
type Error struct {
	File     string
	Problems []Problem
}

func (e *Error) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.File)
		if p.Line > 0 {
			fmt.Fprintf(&b, ":%d", p.Line)
		}
		b.WriteString(": ")
		b.WriteString(p.String())
	}
	return b.String()
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
