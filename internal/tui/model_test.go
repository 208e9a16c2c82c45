package tui

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/present"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/internal/testenv"
	tea "github.com/protctl/protctl/internal/third_party/bubbletea"
	"github.com/protctl/protctl/internal/tui/tuitest"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

// harness drives a Model without a program: it runs the commands Update
// returns on the test goroutine and feeds their messages back, so a test
// sees the state after everything the keys started has finished. Ticks
// are not scheduled (tests send tickMsg themselves).
type harness struct {
	t *testing.T
	m *Model
}

func newHarness(t *testing.T, opts Options) *harness {
	t.Helper()
	m := New(opts)
	m.tick = func(time.Duration, int) tea.Cmd { return nil }
	m.Update(tea.WindowSizeMsg{Width: frameW, Height: frameH})
	return &harness{t: t, m: m}
}

// run executes cmd and every command its messages lead to.
func (h *harness) run(cmd tea.Cmd) {
	h.t.Helper()
	tuitest.Run(h.t, h.m, cmd)
}

func (h *harness) init() *harness {
	h.run(h.m.Init())
	return h
}

// keys sends keys (see keyMsg) and runs what they start.
func (h *harness) keys(ks ...string) *harness {
	h.t.Helper()
	tuitest.Keys(h.t, h.m, ks...)
	return h
}

// typeText sends each rune as a key.
func (h *harness) typeText(s string) *harness {
	h.t.Helper()
	for _, r := range s {
		tuitest.Keys(h.t, h.m, string(r))
	}
	return h
}

func (h *harness) selected() row {
	h.t.Helper()
	r, ok := h.m.page().table.selected()
	if !ok {
		h.t.Fatal("no row selected")
	}
	return r
}

func (h *harness) view() string { return h.m.View() }

// TestKeysDriveState: each key (or key sequence) leads to the state it is
// documented to.
func TestKeysDriveState(t *testing.T) {
	cases := []struct {
		name  string
		opts  func(*Options)
		keys  []string
		check func(t *testing.T, h *harness)
	}{
		{"j moves the cursor down", nil, []string{"j", "j"}, func(t *testing.T, h *harness) {
			if got := h.m.page().table.cursor; got != 2 {
				t.Fatalf("cursor %d, want 2", got)
			}
		}},
		{"G goes to the last row and g back", nil, []string{"G"}, func(t *testing.T, h *harness) {
			if r := h.selected(); r.cells[1] != "o-never" {
				t.Fatalf("selected %v, want o-never", r.cells)
			}
			h.keys("g")
			if h.m.page().table.cursor != 0 {
				t.Fatal("g did not go back to the first row")
			}
		}},
		{":leases switches to the leases view and reads it", nil, []string{":", "l", "e", "a", "s", "e", "s", "enter"}, func(t *testing.T, h *harness) {
			if h.m.active != viewLeases || !h.m.page().loaded || len(h.m.page().table.rows) != 5 {
				t.Fatalf("active %d loaded %v rows %d", h.m.active, h.m.page().loaded, len(h.m.page().table.rows))
			}
		}},
		{":n is the nodes view (alias)", nil, []string{":", "n", "enter"}, func(t *testing.T, h *harness) {
			if h.m.active != viewNodes {
				t.Fatalf("active %d", h.m.active)
			}
		}},
		{"an unknown view is an error line", nil, []string{":", "x", "enter"}, func(t *testing.T, h *harness) {
			if h.m.active != viewPartitions || !strings.Contains(h.view(), `unknown view "x"`) {
				t.Fatalf("active %d, view:\n%s", h.m.active, h.view())
			}
		}},
		{"/ filters as it is typed, case-insensitively", nil, []string{"/", "H", "A", "L", "T"}, func(t *testing.T, h *harness) {
			if n := len(h.m.page().table.index); n != 1 || h.selected().cells[1] != "o-halted" {
				t.Fatalf("%d rows shown", n)
			}
			if h.m.mode != modeFilter {
				t.Fatal("the bar closed")
			}
		}},
		{"/ takes a regular expression", nil, []string{"/", "^", "s", "h", "o", "p", ".", "*", "o", "-", "(", "c", "o", "l", "d", "|", "n", "e", "v", "e", "r", ")", "enter"}, func(t *testing.T, h *harness) {
			var keys []string
			for _, i := range h.m.page().table.index {
				keys = append(keys, h.m.page().table.rows[i].cells[1])
			}
			if strings.Join(keys, " ") != "o-cold o-never" {
				t.Fatalf("rows %v", keys)
			}
		}},
		{"! inverts the filter", nil, []string{"/", "!", "o", "-", "enter"}, func(t *testing.T, h *harness) {
			for _, i := range h.m.page().table.index {
				if k := h.m.page().table.rows[i].cells[1]; strings.Contains(k, "o-") {
					t.Fatalf("row %s kept", k)
				}
			}
			if n := len(h.m.page().table.index); n != 3 {
				t.Fatalf("%d rows, want 3 (p-1 twice, p-ghost)", n)
			}
		}},
		{"esc in the bar restores the previous filter", nil, []string{"/", "c", "o", "l", "d", "enter", "/", "x", "esc"}, func(t *testing.T, h *harness) {
			if f := h.m.page().filter.text; f != "cold" {
				t.Fatalf("filter %q, want cold", f)
			}
		}},
		{"esc in the list clears the filter", nil, []string{"/", "c", "o", "l", "d", "enter", "esc"}, func(t *testing.T, h *harness) {
			if f := h.m.page().filter.text; f != "" || len(h.m.page().table.index) != 9 {
				t.Fatalf("filter %q, %d rows", f, len(h.m.page().table.index))
			}
		}},
		{"an invalid regex keeps the last valid filter", nil, []string{"/", "o", "-", "("}, func(t *testing.T, h *harness) {
			if f := h.m.page().filter.text; f != "o-" || !strings.Contains(h.view(), "invalid filter") {
				t.Fatalf("filter %q, view:\n%s", f, h.view())
			}
		}},
		{"s sorts by the next sortable column, i inverts", nil, []string{"s"}, func(t *testing.T, h *harness) {
			if s := h.m.page().sort; s.col != 1 || s.desc {
				t.Fatalf("sort %+v, want KEY ascending", s)
			}
			first := func() string { p := h.m.page(); return p.table.rows[p.table.index[0]].cells[1] }
			if first() != "o-backfill" {
				t.Fatalf("first row %v", first())
			}
			h.keys("i")
			if first() != "p-ghost" {
				t.Fatalf("first row after i: %v", first())
			}
		}},
		{"sorting by LAG puts the most behind first", nil, []string{"s", "s", "s", "s"}, func(t *testing.T, h *harness) {
			p := h.m.page()
			if viewDefs[viewPartitions].cols[p.sort.col].title != "LAG" || !p.sort.desc {
				t.Fatalf("sort %+v", p.sort)
			}
			var got []string
			for _, i := range p.table.index[:3] {
				got = append(got, p.table.rows[i].cells[1]+"="+p.table.rows[i].cells[5])
			}
			if strings.Join(got, " ") != "o-lagging=5 p-1=4 o-halted=4" {
				t.Fatalf("order %v", got)
			}
		}},
		{"the cursor stays on its row when the sort changes", nil, []string{"/", "h", "a", "l", "t", "enter", "esc", "s"}, func(t *testing.T, h *harness) {
			if h.selected().cells[1] != "o-halted" {
				t.Fatalf("selected %v", h.selected().cells)
			}
		}},
		{"p freezes auto-refresh", nil, []string{"p"}, func(t *testing.T, h *harness) {
			if !h.m.frozen || !strings.Contains(h.view(), "FROZEN") {
				t.Fatal("not paused")
			}
			h.keys("p")
			if h.m.frozen {
				t.Fatal("p did not resume")
			}
		}},
		{"? opens the help, esc closes it", nil, []string{"?"}, func(t *testing.T, h *harness) {
			if h.m.mode != modeHelp || !strings.Contains(h.view(), "Navigate") {
				t.Fatal("no help")
			}
			h.keys("esc")
			if h.m.mode != modeList {
				t.Fatal("esc did not close the help")
			}
		}},
		{"enter explains the partition, esc goes back", nil, []string{"/", "h", "a", "l", "t", "enter", "enter"}, func(t *testing.T, h *harness) {
			if h.m.mode != modeDetail || !strings.Contains(h.view(), "delivered 7 times") {
				t.Fatalf("mode %d view:\n%s", h.m.mode, h.view())
			}
			h.keys("esc")
			if h.m.mode != modeList || h.m.detail != nil {
				t.Fatal("esc did not go back")
			}
		}},
		{"enter on a node shows its held partitions", nil, []string{":", "n", "o", "d", "e", "s", "enter", "enter"}, func(t *testing.T, h *harness) {
			if !strings.Contains(h.view(), "Held partitions (2)") {
				t.Fatalf("view:\n%s", h.view())
			}
		}},
		{"L plans a forced release of a held lease", nil, []string{"/", "h", "a", "l", "t", "enter", "L"}, func(t *testing.T, h *harness) {
			want := ActionRequest{Action: repair.ActionRelease, Category: "shop::order", Key: "o-halted", Group: "app.OrderProjector", Force: true}
			reqs := h.m.opts.Actions.(*fakeActions).requests()
			if diff := cmp.Diff([]ActionRequest{want}, reqs); diff != "" {
				t.Fatalf("planned (-want +got):\n%s", diff)
			}
			if h.m.mode != modeConfirm || h.m.dialog.state != confirmShown {
				t.Fatalf("mode %d", h.m.mode)
			}
			h.keys("n")
			if h.m.mode != modeList || len(h.m.opts.Actions.(*fakeActions).applied) != 0 {
				t.Fatal("n did not cancel, or something was applied")
			}
		}},
		{"L on an expired lease plans without --force", nil, []string{"/", "l", "a", "g", "g", "enter", "L"}, func(t *testing.T, h *harness) {
			if r := h.m.opts.Actions.(*fakeActions).requests(); len(r) != 1 || r[0].Force {
				t.Fatalf("planned %+v", r)
			}
		}},
		{"y applies and the results are shown", nil, []string{"/", "h", "a", "l", "t", "enter", "L", "y"}, func(t *testing.T, h *harness) {
			if len(h.m.opts.Actions.(*fakeActions).applied) != 1 || h.m.dialog.state != confirmDone {
				t.Fatal("not applied")
			}
			if !strings.Contains(h.view(), "Result: 1 applied") {
				t.Fatalf("view:\n%s", h.view())
			}
			h.keys("esc")
			if h.m.dialog != nil || h.m.mode != modeList {
				t.Fatal("esc did not close the dialog")
			}
		}},
		{"R reaps with the CLI's default min-idle", nil, []string{"/", "c", "o", "l", "d", "enter", "R"}, func(t *testing.T, h *harness) {
			r := h.m.opts.Actions.(*fakeActions).requests()
			if len(r) != 1 || r[0].Action != repair.ActionReap || r[0].MinIdle != time.Hour || r[0].Key != "o-cold" {
				t.Fatalf("planned %+v", r)
			}
			if !strings.Contains(h.view(), "protctl partitions reap shop::order o-cold --min-idle 1h0m0s --context prod-eu") {
				t.Fatalf("view:\n%s", h.view())
			}
		}},
		{"T asks for maxlen and refuses a bad answer", nil, []string{"T", "x", "enter"}, func(t *testing.T, h *harness) {
			if len(h.m.opts.Actions.(*fakeActions).requests()) != 0 || !strings.Contains(h.view(), "not a positive number") {
				t.Fatalf("view:\n%s", h.view())
			}
			h.keys("T", "1", "0", "0", "enter")
			r := h.m.opts.Actions.(*fakeActions).requests()
			if len(r) != 1 || r[0].Action != repair.ActionTrim || r[0].MaxLen != 100 || r[0].Stream != "billing::payment:p-1" {
				t.Fatalf("planned %+v", r)
			}
		}},
		{"D asks for a reason and dead-letters the head", nil, []string{"/", "h", "a", "l", "t", "enter", "D", "p", "o", "i", "s", "o", "n", "enter"}, func(t *testing.T, h *harness) {
			r := h.m.opts.Actions.(*fakeActions).requests()
			if len(r) != 1 || r[0].Action != repair.ActionDeadLetter || r[0].Reason != "poison" || r[0].Group != "app.OrderProjector" {
				t.Fatalf("planned %+v", r)
			}
		}},
		{"E replays and X purges the partition's dead letters", nil, []string{"/", "h", "a", "l", "t", "enter", "E", "n", "X"}, func(t *testing.T, h *harness) {
			r := h.m.opts.Actions.(*fakeActions).requests()
			if len(r) != 2 || r[0] != (ActionRequest{Action: repair.ActionDLQReplay, Category: "shop::order", Key: "o-halted"}) ||
				r[1] != (ActionRequest{Action: repair.ActionDLQPurge, Category: "shop::order", Key: "o-halted"}) {
				t.Fatalf("planned %+v", r)
			}
		}},
		{"an action from the detail page acts on its partition", nil, []string{"/", "h", "a", "l", "t", "enter", "enter", "L"}, func(t *testing.T, h *harness) {
			r := h.m.opts.Actions.(*fakeActions).requests()
			if len(r) != 1 || r[0].Key != "o-halted" {
				t.Fatalf("planned %+v", r)
			}
			h.keys("n")
			if h.m.mode != modeDetail {
				t.Fatal("cancel did not return to the detail page")
			}
		}},
		{"S needs a reason in the parked view", nil, []string{":", "p", "k", "enter", "S", "enter"}, func(t *testing.T, h *harness) {
			if len(h.m.opts.Actions.(*fakeActions).requests()) != 0 || !strings.Contains(h.view(), "an answer is required") {
				t.Fatalf("view:\n%s", h.view())
			}
			h.keys("S", "b", "a", "d", "enter")
			r := h.m.opts.Actions.(*fakeActions).requests()
			want := ActionRequest{Action: repair.ActionSkip, Subscription: "app.OrderProjector", Aggregate: "o-halted", Reason: "bad", By: "protctl:test"}
			if diff := cmp.Diff([]ActionRequest{want}, r); diff != "" {
				t.Fatalf("planned (-want +got):\n%s", diff)
			}
		}},
		{"Y retries a parked entry", nil, []string{":", "p", "k", "enter", "j", "Y"}, func(t *testing.T, h *harness) {
			r := h.m.opts.Actions.(*fakeActions).requests()
			if len(r) != 1 || r[0].Action != repair.ActionRetry || r[0].Aggregate != "acct-42" {
				t.Fatalf("planned %+v", r)
			}
		}},
		{"an action the view does not offer is refused", nil, []string{"Y"}, func(t *testing.T, h *harness) {
			if len(h.m.opts.Actions.(*fakeActions).requests()) != 0 || !strings.Contains(h.view(), "not available in the partitions view") {
				t.Fatalf("view:\n%s", h.view())
			}
		}},
		{"read-only mode disables actions", func(o *Options) { o.ReadOnly = true }, []string{"L"}, func(t *testing.T, h *harness) {
			if len(h.m.opts.Actions.(*fakeActions).requests()) != 0 || h.m.mode != modeList {
				t.Fatal("an action ran in read-only mode")
			}
			if !strings.Contains(h.view(), "read-only: L (release) is disabled") {
				t.Fatalf("view:\n%s", h.view())
			}
		}},
		{"without Actions the dashboard is read-only", func(o *Options) { o.Actions = nil }, []string{"R"}, func(t *testing.T, h *harness) {
			if h.m.mode != modeList || !strings.Contains(h.view(), "READ-ONLY") {
				t.Fatalf("view:\n%s", h.view())
			}
		}},
		{"a protected context asks for its name before applying", func(o *Options) { o.Protected = true }, []string{"/", "h", "a", "l", "t", "enter", "L", "y", "y", "enter"}, func(t *testing.T, h *harness) {
			if n := len(h.m.opts.Actions.(*fakeActions).applied); n != 0 || !strings.Contains(h.view(), "declined") {
				t.Fatalf("%d applied; view:\n%s", n, h.view())
			}
			h.keys("y")
			h.typeText("prod-eu")
			h.keys("enter")
			if n := len(h.m.opts.Actions.(*fakeActions).applied); n != 1 {
				t.Fatalf("%d applied after typing the context's name", n)
			}
		}},
		{"the dialog shows what a reap saw, the leases held included", func(o *Options) {
			o.Actions = &fakeActions{seen: &repair.Precondition{LastEntryID: str("1772366220000-4"),
				Leases: []repair.GroupLease{{Group: "app.OrderProjector", Lease: str("worker-1:5")}, {Group: "app.Other"}}}}
		}, []string{"R"}, func(t *testing.T, h *harness) {
			// The CLI's SEEN column (present.Seen); the dashboard's own copy
			// of it left the leases out.
			if !strings.Contains(h.view(), "last entry 1772366220000-4; lease worker-1:5") {
				t.Fatalf("view:\n%s", h.view())
			}
		}},
		{"a failed plan is shown and esc closes it", func(o *Options) { o.Actions = &fakeActions{planErr: errors.New("boom")} }, []string{"R"}, func(t *testing.T, h *harness) {
			if h.m.dialog.state != confirmFailed || !strings.Contains(h.view(), "error: boom") {
				t.Fatalf("view:\n%s", h.view())
			}
			h.keys("esc")
			if h.m.dialog != nil {
				t.Fatal("not closed")
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := testOptions(scenario())
			if c.opts != nil {
				c.opts(&opts)
			}
			h := newHarness(t, opts).init()
			h.keys(c.keys...)
			c.check(t, h)
		})
	}
}

// blockingSource blocks every call until release is closed, and counts
// the calls that entered.
type blockingSource struct {
	calls   atomic.Int32
	entered chan string
	release chan struct{}
	inner   Source
}

func newBlockingSource() *blockingSource {
	return &blockingSource{entered: make(chan string, 100), release: make(chan struct{}), inner: scenario()}
}

func (b *blockingSource) block(ctx context.Context, name string) error {
	b.calls.Add(1)
	b.entered <- name
	select {
	case <-b.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *blockingSource) Categories(ctx context.Context) ([]string, error) {
	if err := b.block(ctx, "categories"); err != nil {
		return nil, err
	}
	return b.inner.Categories(ctx)
}

func (b *blockingSource) Partitions(ctx context.Context, c string, page func([]inspect.Partition) error) error {
	return b.inner.Partitions(ctx, c, page)
}

func (b *blockingSource) Explain(ctx context.Context, c, k string) (inspect.PartitionDetail, error) {
	if err := b.block(ctx, "explain"); err != nil {
		return inspect.PartitionDetail{}, err
	}
	return b.inner.Explain(ctx, c, k)
}

func (b *blockingSource) Leases(ctx context.Context) ([]inspect.Lease, error) {
	if err := b.block(ctx, "leases"); err != nil {
		return nil, err
	}
	return b.inner.Leases(ctx)
}

func (b *blockingSource) Parked(ctx context.Context) ([]ledger.Parked, error) {
	if err := b.block(ctx, "parked"); err != nil {
		return nil, err
	}
	return b.inner.Parked(ctx)
}

func (b *blockingSource) Nodes(ctx context.Context) ([]runtime.NodeStatus, error) {
	if err := b.block(ctx, "nodes"); err != nil {
		return nil, err
	}
	return b.inner.Nodes(ctx)
}

func (b *blockingSource) Topics(ctx context.Context) ([]TopicPartition, error) {
	if err := b.block(ctx, "topics"); err != nil {
		return nil, err
	}
	return b.inner.Topics(ctx)
}

// TestUpdateNeverPerformsIO proves that the source is only called from
// commands: with a source that blocks every call until released, Init and
// Update return at once having called nothing; running the commands calls
// it (and blocks there, not in Update); keys pressed meanwhile still
// return at once and start no second read of a view; releasing the
// source delivers the data.
func TestUpdateNeverPerformsIO(t *testing.T) {
	src := newBlockingSource()
	opts := testOptions(src)
	m := New(opts)
	m.tick = func(time.Duration, int) tea.Cmd { return nil }
	t.Cleanup(m.cancel)

	quick := func(what string, f func()) {
		t.Helper()
		start := time.Now()
		f()
		// A blocked source blocks forever; a second is decisive even on a
		// machine shared with other test runs.
		if d := time.Since(start); d > time.Second {
			t.Fatalf("%s took %s", what, d)
		}
	}
	var cmds []tea.Cmd
	quick("Init", func() { cmds = append(cmds, m.Init()) })
	quick("resize", func() { m.Update(tea.WindowSizeMsg{Width: frameW, Height: frameH}) })
	for _, k := range []string{"r", ":", "l", "e", "a", "s", "e", "s", "enter", "r", ":", "p", "k", "enter", "/", "x", "esc", "s", "i", "p", "p", "j", "?", "esc", "L", "enter"} {
		quick("key "+k, func() {
			_, cmd := m.Update(tuitest.Key(k))
			cmds = append(cmds, cmd)
		})
	}
	if n := src.calls.Load(); n != 0 {
		t.Fatalf("Update or Init called the source %d times", n)
	}

	// Run every command on its own goroutine: they block in the source.
	msgs := make(chan tea.Msg, 100)
	var wg sync.WaitGroup
	var launch func(c tea.Cmd)
	launch = func(c tea.Cmd) {
		if c == nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := c()
			if b, ok := msg.(tea.BatchMsg); ok {
				for _, c := range b {
					launch(c)
				}
				return
			}
			msgs <- msg
		}()
	}
	for _, c := range cmds {
		launch(c)
	}
	// One read per view: partitions (categories), parked, nodes from Init
	// and the leases view; nothing twice, however often r was pressed.
	seen := map[string]int{}
	testenv.Eventually(t, 10*time.Second, "the four views' reads to enter the source", func() (bool, string) {
		for {
			select {
			case name := <-src.entered:
				seen[name]++
			default:
				return len(seen) >= 4, fmt.Sprintf("entered %v", seen)
			}
		}
	})
	for name, n := range seen {
		if n != 1 {
			t.Fatalf("%s was read %d times at once", name, n)
		}
	}
	quick("r while a read is in flight", func() {
		_, cmd := m.Update(tuitest.Key("r"))
		if cmd != nil {
			t.Fatal("r started a second read of the view while one is in flight")
		}
	})
	if !strings.Contains(m.View(), "parked [reading…]") {
		t.Fatalf("view:\n%s", m.View())
	}

	close(src.release)
	wg.Wait()
	close(msgs)
	h := &harness{t: t, m: m}
	for msg := range msgs {
		_, cmd := m.Update(msg)
		h.run(cmd)
	}
	if !m.pages[viewLeases].loaded || !m.pages[viewPartitions].loaded {
		t.Fatal("the released reads did not arrive")
	}
}

// TestFailingSourceKeepsLastData: a read that fails shows an error line
// and leaves the last good rows on screen; the next good read clears it.
func TestFailingSourceKeepsLastData(t *testing.T) {
	src := scenario()
	h := newHarness(t, testOptions(src)).init()
	before := len(h.m.page().table.rows)
	src.SetErr(errors.New("connection refused"))
	h.keys("r")
	v := h.view()
	if !strings.Contains(v, "error: connection refused (showing the last data read)") {
		t.Fatalf("no error line:\n%s", v)
	}
	if len(h.m.page().table.rows) != before || !strings.Contains(v, "o-halted") {
		t.Fatalf("the last data is gone:\n%s", v)
	}
	// Views read by the auto-refresh fail too, and keep their data.
	h.run(h.m.onTick(tickMsg{seq: h.m.tickSeq}))
	if h.m.header.nodes != 3 || h.m.pages[viewNodes].err == nil {
		t.Fatalf("nodes %d err %v", h.m.header.nodes, h.m.pages[viewNodes].err)
	}
	src.SetErr(nil)
	h.keys("r")
	if v := h.view(); strings.Contains(v, "error:") {
		t.Fatalf("the error line stayed:\n%s", v)
	}
}

// A first read that fails says so without "last data".
func TestFailingFirstRead(t *testing.T) {
	src := scenario()
	src.SetErr(errors.New("NOAUTH Authentication required"))
	h := newHarness(t, testOptions(src)).init()
	v := h.view()
	if !strings.Contains(v, "error: NOAUTH Authentication required") || strings.Contains(v, "last data") {
		t.Fatalf("view:\n%s", v)
	}
}

// countingSource counts calls per method.
type countingSource struct {
	Source
	mu    sync.Mutex
	calls map[string]int
}

func (c *countingSource) count(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[name]++
}

func (c *countingSource) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.calls {
		out[k] = v
	}
	return out
}

func (c *countingSource) Categories(ctx context.Context) ([]string, error) {
	c.count("partitions")
	return c.Source.Categories(ctx)
}

func (c *countingSource) Leases(ctx context.Context) ([]inspect.Lease, error) {
	c.count("leases")
	return c.Source.Leases(ctx)
}

func (c *countingSource) Parked(ctx context.Context) ([]ledger.Parked, error) {
	c.count("parked")
	return c.Source.Parked(ctx)
}

func (c *countingSource) Nodes(ctx context.Context) ([]runtime.NodeStatus, error) {
	c.count("nodes")
	return c.Source.Nodes(ctx)
}

func (c *countingSource) Topics(ctx context.Context) ([]TopicPartition, error) {
	c.count("topics")
	return c.Source.Topics(ctx)
}

// TestAutoRefresh: a tick reads the view on screen and the views the
// header sums up, each only when its previous read has finished; a paused
// dashboard and a stale tick read nothing.
func TestAutoRefresh(t *testing.T) {
	src := &countingSource{Source: scenario(), calls: map[string]int{}}
	h := newHarness(t, testOptions(src)).init()
	want := map[string]int{"partitions": 1, "parked": 1, "nodes": 1}
	if got := src.snapshot(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Init read %v, want %v", got, want)
	}
	h.keys(":", "t", "enter") // topics
	h.run(h.m.onTick(tickMsg{seq: h.m.tickSeq}))
	want = map[string]int{"partitions": 2, "parked": 2, "nodes": 2, "topics": 2}
	if got := src.snapshot(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after a tick %v, want %v", got, want)
	}
	// A tick while a read is in flight does not start another.
	h.m.pages[viewTopics].loading = true
	h.run(h.m.onTick(tickMsg{seq: h.m.tickSeq}))
	if got := src.snapshot()["topics"]; got != 2 {
		t.Fatalf("topics read %d times, want 2 (one in flight)", got)
	}
	h.m.pages[viewTopics].loading = false
	h.keys("p")
	h.run(h.m.onTick(tickMsg{seq: h.m.tickSeq}))
	if got := src.snapshot()["topics"]; got != 2 {
		t.Fatalf("a paused dashboard read topics (%d)", got)
	}
	h.keys("p")
	h.run(h.m.onTick(tickMsg{seq: h.m.tickSeq + 1}))
	if got := src.snapshot()["topics"]; got != 2 {
		t.Fatalf("a stale tick read topics (%d)", got)
	}
}

// TestRefreshFloor: the period is raised to MinRefresh, and the next tick
// is scheduled by the tick, not by the reads.
func TestRefreshFloor(t *testing.T) {
	opts := testOptions(scenario())
	opts.Refresh = time.Millisecond
	m := New(opts)
	if m.refresh != MinRefresh {
		t.Fatalf("refresh %s, want the floor %s", m.refresh, MinRefresh)
	}
	opts.Refresh = 0
	if m := New(opts); m.refresh != DefaultRefresh {
		t.Fatalf("default refresh %s", m.refresh)
	}
	opts.Refresh = -1
	if m := New(opts); m.refresh != 0 || m.tick(time.Second, 0) != nil {
		t.Fatal("a negative refresh did not turn auto-refresh off")
	}
}

// TestPagedRead: the partitions view arrives a page at a time; the title
// counts the partitions read so far and the last data stays until the
// read completes.
func TestPagedRead(t *testing.T) {
	src := scenario()
	src.pageSize = 2
	h := newHarness(t, testOptions(src)).init()
	if n := len(h.m.page().table.rows); n != 9 {
		t.Fatalf("%d rows", n)
	}
	cmd := h.m.startLoad(viewPartitions)
	var progress []int
	for cmd != nil {
		msg := cmd().(loadMsg)
		if !msg.done {
			progress = append(progress, msg.progress)
		}
		_, cmd = h.m.Update(msg)
		if !msg.done {
			if v := h.view(); !strings.Contains(v, fmt.Sprintf("reading… %d", msg.progress)) || !strings.Contains(v, "o-never") {
				t.Fatalf("view during the read:\n%s", v)
			}
		}
	}
	if fmt.Sprint(progress) != "[2 4 6 8]" {
		t.Fatalf("progress %v, want a report per page of 2", progress)
	}
}

// TestReadStopsOnQuit: quitting cancels a paged read whose goroutine is
// waiting for the UI, so nothing is left running.
func TestReadStopsOnQuit(t *testing.T) {
	src := scenario()
	src.pageSize = 1
	returned := make(chan error, 1)
	h := newHarness(t, testOptions(&watchedSource{Source: src, returned: returned}))
	cmd := h.m.startLoad(viewPartitions)
	msg := cmd().(loadMsg) // the first page; the reader now waits to hand over the second
	if msg.done {
		t.Fatal("one page of one partition finished the read")
	}
	h.keys("q")
	select {
	case err := <-returned:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Partitions returned %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the read kept running after quit")
	}
}

type watchedSource struct {
	Source
	returned chan error
}

func (w *watchedSource) Partitions(ctx context.Context, c string, page func([]inspect.Partition) error) error {
	err := w.Source.Partitions(ctx, c, page)
	if err != nil {
		w.returned <- err
	}
	return err
}

// TestCellsAreEscaped: a key holding terminal control sequences is shown
// escaped, never sent to the terminal.
func TestCellsAreEscaped(t *testing.T) {
	src := NewMemorySource(0)
	src.SetPartitions("c", []inspect.Partition{{Category: "c", Key: "evil\x1b[2Jkey", Stream: "c:evil"}})
	h := newHarness(t, testOptions(src)).init()
	v := h.view()
	if strings.Contains(v, "\x1b") || !strings.Contains(v, `evil\x1b[2Jkey`) {
		t.Fatalf("view:\n%q", v)
	}
}

func TestCommandLine(t *testing.T) {
	cases := []struct {
		name string
		req  ActionRequest
		ctx  string
		want string
	}{
		{"reap", ActionRequest{Action: repair.ActionReap, Category: "shop::order", Key: "o-1", MinIdle: time.Hour}, "",
			"protctl partitions reap shop::order o-1 --min-idle 1h0m0s"},
		{"release held", ActionRequest{Action: repair.ActionRelease, Category: "shop::order", Key: "o-1", Group: "g", Force: true}, "prod",
			"protctl partitions release shop::order o-1 --group g --force --context prod"},
		{"release free", ActionRequest{Action: repair.ActionRelease, Category: "shop::order", Key: "o 1", Group: "g"}, "",
			"protctl partitions release shop::order 'o 1' --group g"},
		{"trim", ActionRequest{Action: repair.ActionTrim, Stream: "shop::order:o-1", MaxLen: 100}, "",
			"protctl streams trim shop::order:o-1 --maxlen 100"},
		{"skip-head", ActionRequest{Action: repair.ActionDeadLetter, Category: "c", Key: "k", Group: "g", Reason: "it's bad"}, "",
			`protctl partitions skip-head c k --group g --reason 'it'\''s bad'`},
		{"retry", ActionRequest{Action: repair.ActionRetry, Subscription: "s", Aggregate: "a"}, "",
			"protctl parked retry s a"},
		{"dlq replay", ActionRequest{Action: repair.ActionDLQReplay, Category: "shop::order", Key: "o-1"}, "",
			"protctl dlq replay shop::order --key o-1"},
		{"dlq purge of a key a glob would read otherwise", ActionRequest{Action: repair.ActionDLQPurge, Category: "c", Key: "o*[1]"}, "",
			`protctl dlq purge c --key 'o\*\[1\]'`},
		{"skip", ActionRequest{Action: repair.ActionSkip, Subscription: "s", Aggregate: "a", Reason: "poison"}, "",
			"protctl parked skip s a --reason poison"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.req.CommandLine(c.ctx); got != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
			if err := c.req.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// An unknown lag (entries deleted from the middle of a lane) sorts as
// the worst lag, as the CLI's --sort-by lag does.
func TestUnknownLagSortsFirst(t *testing.T) {
	lag := int64(9)
	parts := []inspect.Partition{
		{Category: "c", Key: "known", Groups: []inspect.Group{{Name: "g", Lag: &lag}}},
		{Category: "c", Key: "unknown", Groups: []inspect.Group{{Name: "g"}}},
		{Category: "c", Key: "nogroup"},
	}
	d := viewDefs[viewPartitions]
	rows := partitionRows(parts, 0)
	idx := buildIndex(d.cols, rows, filterSpec{}, sortSpec{col: 5, desc: true}, d.idCols)
	var got []string
	for _, i := range idx {
		got = append(got, rows[i].cells[1]+"="+rows[i].cells[5])
	}
	if strings.Join(got, " ") != "unknown=? known=9 nogroup=-" {
		t.Fatalf("order %v", got)
	}
}

func TestSparkline(t *testing.T) {
	cases := []struct {
		in   []int64
		want string
	}{
		{nil, ""},
		{[]int64{0, 0}, "▁▁"},
		{[]int64{0, 7, 14}, "▁▅█"},
		{[]int64{1, 100}, "▂█"},
	}
	for _, c := range cases {
		if got := sparkline(c.in); got != c.want {
			t.Errorf("sparkline(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestDetailHintsAreTheCLIs: the detail page's repair hints are
// `partitions show`'s (present.RepairHints), each naming the key that
// opens the same plan.
func TestDetailHintsAreTheCLIs(t *testing.T) {
	d, err := scenario().Explain(t.Context(), "shop::order", "o-halted")
	if err != nil {
		t.Fatal(err)
	}
	hints := present.RepairHints(&d)
	if len(hints) != 2 {
		t.Fatalf("the fixture's stuck partition has %d hints, want 2 (skip-head, release)", len(hints))
	}
	text := explainText(&d)
	for _, h := range hints {
		want := strings.TrimSuffix(h.What, ":") + " (" + hintKey(h.Action) + "):\n  " + h.Command + "\n"
		if !strings.Contains(text, want) {
			t.Errorf("the detail does not show\n%s\nin\n%s", want, text)
		}
	}
	for _, k := range []string{"(D):", "(L):"} {
		if !strings.Contains(text, k) {
			t.Errorf("no hint names the key %s:\n%s", k, text)
		}
	}
}
