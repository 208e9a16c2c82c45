package tui

import (
	"io"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
)

// NewRenderer returns the renderer the dashboard draws with on w: the
// colour profile the environment gives w when color is true, plain text
// otherwise. It never asks the terminal anything: the styles use only the
// 16 basic ANSI colours, which the terminal maps to its own palette, so
// the background is fixed instead of queried. A query while the program
// owns the terminal would wait up to 5 s on a terminal that does not
// answer, and on one that does the reply would arrive as key presses.
func NewRenderer(w io.Writer, color bool) *lipgloss.Renderer {
	r := lipgloss.NewRenderer(w)
	if !color {
		r.SetColorProfile(termenv.Ascii)
	}
	r.SetHasDarkBackground(true)
	return r
}
