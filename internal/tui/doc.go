// Package tui is protctl's dashboard (`protctl tui`): a bubbletea v1
// program that renders what internal/inspect returns and acts through
// internal/repair, adding no logic of its own beyond layout.
//
// # Shape
//
// Model is the root model (soft-serve's layout): it owns one page per list
// view (partitions, leases, parked, topics, nodes) and the components:
// the header (context, endpoints, node count, totals and a lag sparkline
// per category), a virtualised table per page, the input bar (the :
// command, the / filter and an action's question), the detail page
// (enter), the help page (?, generated from the KeyMap) and the confirm
// dialog. There is one KeyMap of key.Bindings and one Styles struct.
//
// # Data flow
//
// The dashboard reads through a Source and acts through Actions, two
// small interfaces: RedisBackend adapts an inspect.Inspector and a
// repair.Repairer (production), MemorySource holds snapshots (tests, the
// embedded demo). Update never performs I/O and never blocks: every call
// to the Source or Actions happens inside a tea.Cmd, and its answer comes
// back to Update as a typed message:
//
//	key r / tick ──startLoad──▶ loadCmd ──Source──▶ loadMsg{progress, next}…
//	                                             ──▶ loadMsg{done, res|err}
//	key enter    ──────────────▶ explainCmd ──────▶ explainMsg
//	key L/R/T/D/Y/S ──(prompt)─▶ plan cmd ────────▶ planMsg   (dialog shown)
//	key y        ──────────────▶ apply cmd ───────▶ applyMsg  (results shown)
//
// A view has at most one read in flight: startLoad returns nil while its
// page is loading, whichever key or tick asked. Auto-refresh ticks every
// Options.Refresh (at least MinRefresh) and reads the view on screen and
// the views the header sums up, each only if its previous read finished,
// so a slow backend is never asked faster than it answers. A failed read
// sets the page's error line and keeps the last data read.
//
// # Paged reads and the virtualised table
//
// The partitions view is read a page at a time (Source.Partitions). A
// goroutine started by the command walks the pages and hands each
// progress report to the next command through an unbuffered channel, so
// it never runs ahead of the UI and ends when the model quits. Everything
// a frame needs is computed in that goroutine: each row's cells (escaped
// against terminal control sequences), the columns' natural widths, the
// header's per-category totals and the shown index for the filter and
// sort in force. The new snapshot replaces the old one only when the read
// is complete. A filter or sort change rebuilds the index in Update (one
// pass over the rows); View renders only the rows in view, so a frame's
// cost does not grow with the number of rows (docs/benchmarks.md, "Dashboard benchmarks").
//
// # Actions
//
// Destructive actions are on capital letters only: R reap, L release, T
// trim, D dead-letter the head (partitions skip-head), Y retry and S skip
// a parked entry. Each builds the ActionRequest of the selected row, asks
// for what it needs (trim's maxlen, a reason), has the backend build the
// same repair.Plan the CLI command builds, and shows the equivalent
// command line (ActionRequest.CommandLine) with the plan's items. Only y
// applies (in a protected context, typing the context's name); the
// dialog then shows each item's result. In read-only mode, or without
// Actions, the actions are greyed out and refused.
package tui
