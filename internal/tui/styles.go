package tui

import (
	"github.com/charmbracelet/lipgloss"
)

// tone is the meaning of a cell, which the styles turn into a colour when
// colour is on. Without colour tones change nothing, so a tone never
// carries information the text does not (the CLI's rule, output.Tone).
type tone uint8

const (
	toneNone tone = iota
	toneGood
	toneWarn
	toneBad
	toneMuted
)

// Styles is every style the dashboard uses, built once from one renderer.
// With the Ascii profile (no colour: NO_COLOR, --color never, tests) every
// style renders its text unchanged, so the frame is plain text and the
// selected row is marked by the cursor column, not by reverse video.
type Styles struct {
	App        lipgloss.Style
	Title      lipgloss.Style
	Label      lipgloss.Style
	Value      lipgloss.Style
	Flag       lipgloss.Style // FROZEN, READ-ONLY
	ViewTitle  lipgloss.Style
	TableHead  lipgloss.Style
	Selected   lipgloss.Style
	Error      lipgloss.Style
	Status     lipgloss.Style
	HintKey    lipgloss.Style
	HintDesc   lipgloss.Style
	Disabled   lipgloss.Style
	Section    lipgloss.Style
	Dialog     lipgloss.Style
	DialogHead lipgloss.Style
	Command    lipgloss.Style
	Spark      lipgloss.Style
	Tones      [5]lipgloss.Style
}

// NewStyles returns the dashboard's styles on r. Colours are the 16 basic
// ANSI colours, which every terminal maps to its own palette.
func NewStyles(r *lipgloss.Renderer) Styles {
	s := Styles{
		App:        r.NewStyle().Bold(true).Foreground(lipgloss.Color("6")),
		Title:      r.NewStyle().Bold(true),
		Label:      r.NewStyle().Foreground(lipgloss.Color("8")),
		Value:      r.NewStyle(),
		Flag:       r.NewStyle().Bold(true).Foreground(lipgloss.Color("3")),
		ViewTitle:  r.NewStyle().Bold(true).Foreground(lipgloss.Color("6")),
		TableHead:  r.NewStyle().Bold(true),
		Selected:   r.NewStyle().Reverse(true),
		Error:      r.NewStyle().Bold(true).Foreground(lipgloss.Color("1")),
		Status:     r.NewStyle().Foreground(lipgloss.Color("8")),
		HintKey:    r.NewStyle().Bold(true),
		HintDesc:   r.NewStyle().Foreground(lipgloss.Color("8")),
		Disabled:   r.NewStyle().Foreground(lipgloss.Color("8")).Strikethrough(true),
		Section:    r.NewStyle().Bold(true).Underline(true),
		Dialog:     r.NewStyle(),
		DialogHead: r.NewStyle().Bold(true).Foreground(lipgloss.Color("3")),
		Command:    r.NewStyle().Bold(true),
		Spark:      r.NewStyle().Foreground(lipgloss.Color("3")),
	}
	s.Tones[toneNone] = r.NewStyle()
	s.Tones[toneGood] = r.NewStyle().Foreground(lipgloss.Color("2"))
	s.Tones[toneWarn] = r.NewStyle().Foreground(lipgloss.Color("3"))
	s.Tones[toneBad] = r.NewStyle().Foreground(lipgloss.Color("1")).Bold(true)
	s.Tones[toneMuted] = r.NewStyle().Foreground(lipgloss.Color("8"))
	return s
}
