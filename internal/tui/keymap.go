package tui

import (
	"strings"

	"github.com/charmbracelet/bubbles/key"
)

// KeyMap is every key the dashboard answers to. The help page (?) and the
// hint line are generated from it, so a binding documents itself.
//
// Destructive actions are on capital letters only (never on a control
// key, which a terminal multiplexer or a slipped finger sends too easily),
// and each one opens a plan that needs y to apply.
type KeyMap struct {
	// Navigation.
	Up, Down, PageUp, PageDown, Top, Bottom key.Binding
	// Views and modes.
	Command, Filter, Detail, Back, Help, Refresh, Freeze key.Binding
	SortNext, SortReverse                                key.Binding
	Quit                                                 key.Binding
	// Actions (capital letters): each opens a plan.
	Reap, Release, Trim, SkipHead, Retry, Skip key.Binding
	ReplayDLQ, PurgeDLQ                        key.Binding
	// Seek moves the row's group (partitions seek) or the topic row's
	// subscription on its partition (topics seek).
	Seek key.Binding
	// In the confirm dialog.
	Confirm, Cancel key.Binding
}

// DefaultKeyMap is the dashboard's keymap. Each binding's help is a
// short word for the hint line; the help page adds a sentence (help).
func DefaultKeyMap() KeyMap {
	b := func(help string, keys ...string) key.Binding {
		return key.NewBinding(key.WithKeys(keys...), key.WithHelp(strings.Join(keyNames(keys), "/"), help))
	}
	return KeyMap{
		Up:       b("up", "up", "k"),
		Down:     b("down", "down", "j"),
		PageUp:   b("page up", "pgup", "b"),
		PageDown: b("page down", "pgdown", "f"),
		Top:      b("first", "home", "g"),
		Bottom:   b("last", "end", "G"),

		Command:     b("view", ":"),
		Filter:      b("filter", "/"),
		Detail:      b("show", "enter"),
		Back:        b("back", "esc"),
		Help:        b("help", "?"),
		Refresh:     b("refresh", "r"),
		Freeze:      b("freeze", "p"),
		SortNext:    b("sort", "s"),
		SortReverse: b("invert", "i"),
		Quit:        b("quit", "q", "ctrl+c"),

		Reap:     b("reap", "R"),
		Release:  b("release", "L"),
		Trim:     b("trim", "T"),
		SkipHead: b("dead-letter", "D"),
		Retry:    b("retry", "Y"),
		Skip:     b("skip", "S"),

		ReplayDLQ: b("replay", "E"),
		PurgeDLQ:  b("purge", "X"),
		Seek:      b("seek", "W"),

		Confirm: b("apply", "y"),
		Cancel:  b("cancel", "n", "esc"),
	}
}

// keyNames are the keys as the help shows them.
func keyNames(keys []string) []string {
	names := map[string]string{"up": "↑", "down": "↓", "pgup": "pgup", "pgdown": "pgdn"}
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		if strings.HasPrefix(k, "ctrl+") && len(keys) > 1 {
			continue // ctrl+c quits too, but q is the one to show
		}
		if n, ok := names[k]; ok {
			k = n
		}
		out = append(out, k)
	}
	return out
}

// help is the help page's description of a binding (by its short help).
var help = map[string]string{
	"up":          "previous row",
	"down":        "next row",
	"page up":     "previous page",
	"page down":   "next page",
	"first":       "first row",
	"last":        "last row",
	"view":        ":partitions :leases :parked :topics :nodes",
	"filter":      "filter: regex, case-insensitive; !re inverts",
	"show":        "explain the row (as partitions show does)",
	"back":        "close the page; clear the filter",
	"help":        "this page",
	"refresh":     "read the view now",
	"freeze":      "freeze or resume auto-refresh",
	"sort":        "sort by the next column",
	"invert":      "invert the sort order",
	"quit":        "quit",
	"reap":        "reap the partition (partitions reap)",
	"release":     "release the lease (partitions release)",
	"trim":        "trim the stream to N (streams trim)",
	"dead-letter": "dead-letter the head (partitions skip-head)",
	"retry":       "retry the parked entry (parked retry)",
	"skip":        "skip the parked entry (parked skip)",
	"replay":      "replay its dead letters (dlq replay)",
	"purge":       "purge its dead letters (dlq purge)",
	"seek":        "move a group or checkpoint (partitions/topics seek)",
}

// describe is b's description on the help page.
func describe(b key.Binding) string {
	if d, ok := help[b.Help().Desc]; ok {
		return d
	}
	return b.Help().Desc
}

// helpSection is a titled group of bindings on the help page.
type helpSection struct {
	title    string
	bindings []key.Binding
	actions  bool // greyed out in read-only mode
}

func (k KeyMap) sections() []helpSection {
	return []helpSection{
		{title: "Navigate", bindings: []key.Binding{k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom}},
		{title: "View", bindings: []key.Binding{k.Command, k.Filter, k.Detail, k.Back, k.SortNext, k.SortReverse, k.Refresh, k.Freeze, k.Help, k.Quit}},
		{title: "Act (capital letters)", bindings: []key.Binding{k.Reap, k.Release, k.Trim, k.SkipHead, k.ReplayDLQ, k.PurgeDLQ, k.Seek, k.Retry, k.Skip}, actions: true},
	}
}

// hints are the bindings on the bottom line of a list view.
func (k KeyMap) hints() []key.Binding {
	return []key.Binding{k.Command, k.Filter, k.Detail, k.SortNext, k.Refresh, k.Freeze, k.Help, k.Quit}
}
