package output

import (
	"io"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
)

// Tone is the meaning of a table cell or a word, which the styles turn into
// a colour when colour is on. Without colour tones change nothing, so a
// tone never carries information the text does not.
type Tone int

// Tones.
const (
	ToneNone  Tone = iota
	ToneGood       // healthy, held, applied
	ToneWarn       // lagging, expiring, retrying
	ToneBad        // stuck, expired, parked, conflict
	ToneMuted      // unknown, free, secondary detail
)

// Styles renders text for one output stream. When colour is off every
// method returns its argument unchanged.
type Styles struct {
	enabled bool
	header  lipgloss.Style
	bold    lipgloss.Style
	tones   map[Tone]lipgloss.Style
}

// newStyles returns the styles for w. Colour uses the 16 basic ANSI colours,
// which every terminal maps to its own palette, and is forced on when
// enabled (the caller decided, e.g. --color always into a pipe).
func newStyles(w io.Writer, enabled bool) Styles {
	if !enabled {
		return Styles{}
	}
	r := lipgloss.NewRenderer(w)
	r.SetColorProfile(termenv.ANSI)
	return Styles{
		enabled: true,
		header:  r.NewStyle().Bold(true),
		bold:    r.NewStyle().Bold(true),
		tones: map[Tone]lipgloss.Style{
			ToneGood:  r.NewStyle().Foreground(lipgloss.Color("2")),
			ToneWarn:  r.NewStyle().Foreground(lipgloss.Color("3")),
			ToneBad:   r.NewStyle().Foreground(lipgloss.Color("1")).Bold(true),
			ToneMuted: r.NewStyle().Foreground(lipgloss.Color("8")),
		},
	}
}

// Enabled reports whether these styles emit ANSI escapes.
func (s Styles) Enabled() bool { return s.enabled }

// Header styles a table header or section title.
func (s Styles) Header(text string) string { return s.render(s.header, text) }

// Bold emphasises text.
func (s Styles) Bold(text string) string { return s.render(s.bold, text) }

// Tone colours text by its meaning.
func (s Styles) Tone(t Tone, text string) string {
	if !s.enabled || t == ToneNone {
		return text
	}
	return s.render(s.tones[t], text)
}

func (s Styles) render(st lipgloss.Style, text string) string {
	if !s.enabled || text == "" {
		return text
	}
	return st.Render(text)
}
