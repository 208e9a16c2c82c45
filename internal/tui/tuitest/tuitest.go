// Package tuitest drives a bubbletea model in tests without a terminal:
// it sends keys and runs the commands they start, feeding each command's
// message back to the model, until no command is left. The dashboard's
// own tests (internal/tui) and the CLI's tests of `protctl tui` over a
// real Redis (cmd/protctl) drive the model the same way.
package tuitest

import (
	"testing"
	"time"

	tea "github.com/protctl/protctl/internal/third_party/bubbletea"
)

// Timeout is how long one command may run before the test fails. It is
// generous: a command may read a real Redis on a loaded machine.
const Timeout = 20 * time.Second

// Run runs cmd and every command the messages it leads to start, in
// order, each message going to m.Update (a pointer model, updated in
// place). A tea.BatchMsg's commands are queued. A command that does not
// return within Timeout fails the test.
func Run(t testing.TB, m tea.Model, cmd tea.Cmd) {
	t.Helper()
	queue := []tea.Cmd{cmd}
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		if c == nil {
			continue
		}
		done := make(chan tea.Msg, 1)
		go func() { done <- c() }()
		var msg tea.Msg
		select {
		case msg = <-done:
		case <-time.After(Timeout):
			t.Fatalf("a command did not return within %s", Timeout)
		}
		if batch, ok := msg.(tea.BatchMsg); ok {
			queue = append(queue, batch...)
			continue
		}
		_, next := m.Update(msg)
		queue = append(queue, next)
	}
}

// Keys sends each key (see Key) to m and runs what it starts.
func Keys(t testing.TB, m tea.Model, keys ...string) {
	t.Helper()
	for _, k := range keys {
		_, cmd := m.Update(Key(k))
		Run(t, m, cmd)
	}
}

// Key is the key message of a name: "enter", "esc", "down", "up",
// "pgdown", "ctrl+c" and "space" are those keys; anything else is typed
// as runes ("q", "/").
func Key(name string) tea.KeyMsg {
	switch name {
	case "enter":
		return tea.KeyMsg{Type: tea.KeyEnter}
	case "esc":
		return tea.KeyMsg{Type: tea.KeyEsc}
	case "down":
		return tea.KeyMsg{Type: tea.KeyDown}
	case "up":
		return tea.KeyMsg{Type: tea.KeyUp}
	case "pgdown":
		return tea.KeyMsg{Type: tea.KeyPgDown}
	case "ctrl+c":
		return tea.KeyMsg{Type: tea.KeyCtrlC}
	case "space":
		return tea.KeyMsg{Type: tea.KeySpace, Runes: []rune{' '}}
	}
	return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(name)}
}
