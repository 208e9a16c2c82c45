package tui

import (
	"context"
	"io"

	tea "github.com/protctl/protctl/internal/third_party/bubbletea"
)

// Run runs the dashboard on a terminal (in and out must be one) in the
// alternate screen until the user quits or ctx ends.
func Run(ctx context.Context, opts Options, in io.Reader, out io.Writer) error {
	if opts.Context == nil {
		opts.Context = ctx
	}
	m := New(opts)
	defer m.cancel()
	p := tea.NewProgram(m, tea.WithContext(ctx), tea.WithInput(in), tea.WithOutput(out), tea.WithAltScreen())
	_, err := p.Run()
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
