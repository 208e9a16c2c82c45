package output

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/charmbracelet/x/ansi"
)

// progressInterval is how often a progress line may be redrawn.
const progressInterval = 100 * time.Millisecond

// Progress reports how far long work has got (a paced SCAN, a bulk
// retry), for people: on a terminal it redraws one status line on stderr
// at most every 100ms; without a terminal on stderr it prints nothing, so
// logs and pipes get no spinner noise. The result goes to stdout as usual.
// It is safe for concurrent use.
type Progress struct {
	w       io.Writer
	enabled bool
	width   int
	label   string
	now     func() time.Time

	mu    sync.Mutex
	last  time.Time
	shown bool
}

// NewProgress starts a progress line labelled label ("scanning for
// categories"). Call Done when the work ends, before printing results.
func (s *IOStreams) NewProgress(label string) *Progress {
	return &Progress{
		w:       s.ErrOut,
		enabled: s.IsStderrTTY(),
		width:   s.TerminalWidth(),
		label:   label,
		now:     time.Now,
	}
}

// Update shows the current state, e.g. Update("%d keys, %d categories",
// n, c). Calls closer together than the redraw interval are dropped.
func (p *Progress) Update(format string, a ...any) {
	if !p.enabled {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if p.shown && now.Sub(p.last) < progressInterval {
		return
	}
	p.last, p.shown = now, true
	line := Escape(p.label + ": " + fmt.Sprintf(format, a...))
	if p.width > 1 {
		line = ansi.Truncate(line, p.width-1, "…")
	}
	fmt.Fprintf(p.w, "\r\x1b[K%s", line)
}

// Done clears the progress line. Calling it twice, or without any
// Update, is harmless.
func (p *Progress) Done() {
	if !p.enabled {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
}
