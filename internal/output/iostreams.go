package output

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/charmbracelet/x/term"
)

// ColorMode is the --color setting.
type ColorMode string

// Colour modes.
const (
	ColorAuto   ColorMode = "auto"   // colour on a TTY unless NO_COLOR is set or TERM=dumb
	ColorAlways ColorMode = "always" // colour even when piped, and despite NO_COLOR
	ColorNever  ColorMode = "never"
)

// ParseColorMode accepts "auto", "always" and "never".
func ParseColorMode(s string) (ColorMode, error) {
	switch m := ColorMode(s); m {
	case ColorAuto, ColorAlways, ColorNever:
		return m, nil
	case "":
		return ColorAuto, nil
	}
	return "", fmt.Errorf("invalid --color %q: want auto, always or never", s)
}

// DefaultWidth is the terminal width assumed when it cannot be measured.
const DefaultWidth = 80

// IOStreams are the standard streams of one protctl invocation and what is
// known about them. Create one with System (the process's streams) or Test
// (buffers). It is not safe for concurrent use while being configured;
// writes to Out and ErrOut are as safe as the writers are.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer

	stdinTTY, stdoutTTY, stderrTTY bool

	colorMode ColorMode
	noColor   bool // NO_COLOR is set to a non-empty value
	dumbTerm  bool // TERM=dumb

	width     int        // forced width; 0 = measure
	measureFn func() int // measures stdout's width; nil when not a terminal
}

// System returns the process's standard streams, with TTY detection on the
// real file descriptors and NO_COLOR, TERM and COLUMNS read from the
// environment.
func System() *IOStreams {
	s := &IOStreams{
		In:        os.Stdin,
		Out:       os.Stdout,
		ErrOut:    os.Stderr,
		stdinTTY:  term.IsTerminal(os.Stdin.Fd()),
		stdoutTTY: term.IsTerminal(os.Stdout.Fd()),
		stderrTTY: term.IsTerminal(os.Stderr.Fd()),
		colorMode: ColorAuto,
	}
	s.applyEnv(os.Getenv)
	if s.stdoutTTY {
		fd := os.Stdout.Fd()
		s.measureFn = func() int {
			w, _, err := term.GetSize(fd)
			if err != nil {
				return 0
			}
			return w
		}
	}
	return s
}

func (s *IOStreams) applyEnv(getenv func(string) string) {
	s.noColor = getenv("NO_COLOR") != ""
	s.dumbTerm = getenv("TERM") == "dumb"
	if c, err := strconv.Atoi(getenv("COLUMNS")); err == nil && c > 0 && s.width == 0 {
		s.width = c
	}
}

// Test returns streams backed by buffers: nothing is a TTY, colour is
// auto (so off), the width is DefaultWidth and the environment is ignored.
// Use the setters to simulate a terminal.
func Test() (s *IOStreams, in, out, errOut *bytes.Buffer) {
	in, out, errOut = new(bytes.Buffer), new(bytes.Buffer), new(bytes.Buffer)
	s = &IOStreams{In: in, Out: out, ErrOut: errOut, colorMode: ColorAuto, width: DefaultWidth}
	return s, in, out, errOut
}

// SetStdinTTY forces whether stdin counts as a terminal.
func (s *IOStreams) SetStdinTTY(v bool) { s.stdinTTY = v }

// SetStdoutTTY forces whether stdout counts as a terminal.
func (s *IOStreams) SetStdoutTTY(v bool) { s.stdoutTTY = v }

// SetStderrTTY forces whether stderr counts as a terminal.
func (s *IOStreams) SetStderrTTY(v bool) { s.stderrTTY = v }

// SetTTY forces all three streams to be, or not be, terminals.
func (s *IOStreams) SetTTY(v bool) { s.stdinTTY, s.stdoutTTY, s.stderrTTY = v, v, v }

// SetColorMode applies --color.
func (s *IOStreams) SetColorMode(m ColorMode) { s.colorMode = m }

// SetNoColorEnv simulates NO_COLOR being set (or not) in the environment.
func (s *IOStreams) SetNoColorEnv(v bool) { s.noColor = v }

// SetTerminalWidth forces the width; 0 goes back to measuring.
func (s *IOStreams) SetTerminalWidth(w int) { s.width = w }

// IsStdinTTY reports whether stdin is a terminal.
func (s *IOStreams) IsStdinTTY() bool { return s.stdinTTY }

// IsStdoutTTY reports whether stdout is a terminal.
func (s *IOStreams) IsStdoutTTY() bool { return s.stdoutTTY }

// IsStderrTTY reports whether stderr is a terminal.
func (s *IOStreams) IsStderrTTY() bool { return s.stderrTTY }

// ColorMode returns the --color setting in force.
func (s *IOStreams) ColorMode() ColorMode { return s.colorMode }

// ColorEnabled reports whether output to Out may carry ANSI styling:
// always with --color always; never with --color never; otherwise only
// when stdout is a terminal, NO_COLOR is unset or empty, and TERM is not
// "dumb".
func (s *IOStreams) ColorEnabled() bool {
	switch s.colorMode {
	case ColorAlways:
		return true
	case ColorNever:
		return false
	}
	return s.stdoutTTY && !s.noColor && !s.dumbTerm
}

// CanPrompt reports whether the user can be asked a question: stdin is a
// terminal. Without one nothing prompts and nothing waits for input.
func (s *IOStreams) CanPrompt() bool { return s.stdinTTY }

// TerminalWidth is stdout's width in columns: the forced width (Test,
// SetTerminalWidth, COLUMNS), else the measured one, else DefaultWidth.
func (s *IOStreams) TerminalWidth() int {
	if s.width > 0 {
		return s.width
	}
	if s.measureFn != nil {
		if w := s.measureFn(); w > 0 {
			return w
		}
	}
	return DefaultWidth
}
