package output

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/protctl/protctl/internal/clierr"
)

// ConfirmOptions are the guard rails in force for one mutation.
type ConfirmOptions struct {
	Yes      bool // --yes: the user agreed in advance
	ReadOnly bool // --read-only or the context's readOnly: refuse every change
	// Protected (the context's protected) makes the prompt ask for the
	// context's name instead of "y", so a reflexive "y" at 3 a.m. does not
	// change production. --yes still agrees in advance.
	Protected bool
	Context   string // the context's name, for the protected prompt
}

// Refusal messages, part of the contract's wording.
const (
	msgNoTTY    = "refusing to change anything without --yes when stdin is not a terminal"
	msgReadOnly = "refusing to change anything in read-only mode (--read-only or the context's readOnly)"
)

// CheckWritable returns a REFUSED error (exit 6) when opts are read-only.
// Mutators call it before doing any work, so a read-only session fails
// fast; --dry-run plans are reads and do not call it.
func CheckWritable(opts ConfirmOptions) error {
	if opts.ReadOnly {
		return clierr.Refused.Errorf("%s", msgReadOnly)
	}
	return nil
}

// Confirm asks before a mutation. It returns nil to go ahead, or a REFUSED
// error (exit 6) when the change must not happen:
//
//   - read-only: refused, nothing asked;
//   - --yes: go ahead, nothing asked;
//   - stdin is not a terminal: refused, nothing asked or read;
//   - otherwise question is asked on stderr with a [y/N] prompt (or, for
//     a protected context, the context's name must be typed) and anything
//     but "y"/"yes" (or the name) declines. ctx ending stops the wait.
func (s *IOStreams) Confirm(ctx context.Context, question string, opts ConfirmOptions) error {
	if err := CheckWritable(opts); err != nil {
		return err
	}
	if opts.Yes {
		return nil
	}
	if !s.CanPrompt() {
		return clierr.Refused.Errorf("%s", msgNoTTY)
	}
	prompt := question + " [y/N]: "
	if opts.Protected {
		prompt = fmt.Sprintf("%s\nContext %q is protected; type its name to confirm: ", question, opts.Context)
	}
	if _, err := io.WriteString(s.ErrOut, prompt); err != nil {
		return err
	}
	answer, err := readLine(ctx, s.In)
	if err != nil {
		return err
	}
	answer = strings.TrimSpace(answer)
	if opts.Protected {
		if answer == opts.Context && answer != "" {
			return nil
		}
	} else if a := strings.ToLower(answer); a == "y" || a == "yes" {
		return nil
	}
	return clierr.Refused.Errorf("declined: nothing was changed")
}

// readLine reads up to a newline one byte at a time, so nothing after the
// answer is consumed from r. It gives up when ctx ends; the reading
// goroutine then stays blocked on r until the process exits, which is
// acceptable for a terminal.
func readLine(ctx context.Context, r io.Reader) (string, error) {
	type result struct {
		line string
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		var b strings.Builder
		buf := make([]byte, 1)
		for {
			n, err := r.Read(buf)
			if n == 1 {
				if buf[0] == '\n' {
					ch <- result{b.String(), nil}
					return
				}
				b.WriteByte(buf[0])
			}
			if err == io.EOF {
				ch <- result{b.String(), nil}
				return
			}
			if err != nil {
				ch <- result{"", err}
				return
			}
		}
	}()
	select {
	case res := <-ch:
		return res.line, res.err
	case <-ctx.Done():
		if cause := context.Cause(ctx); cause != nil {
			return "", cause
		}
		return "", ctx.Err()
	}
}
