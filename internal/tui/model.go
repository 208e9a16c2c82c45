package tui

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/internal/third_party/bubbles/cursor"
	"github.com/protctl/protctl/internal/third_party/bubbles/textinput"
	tea "github.com/protctl/protctl/internal/third_party/bubbletea"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// Refresh defaults. The period is the floor between two automatic reads
// of a view: a read starts on a tick only when the view's previous read
// has finished, so a slow backend is never asked twice at once.
const (
	DefaultRefresh = 2 * time.Second
	MinRefresh     = 500 * time.Millisecond
	// DefaultReapMinIdle is the reap action's minimum idle time, the
	// CLI's --min-idle default.
	DefaultReapMinIdle = time.Hour
)

// Options configure New.
type Options struct {
	// Source is what the dashboard reads. Required.
	Source Source
	// Actions plans and applies repairs; nil makes the dashboard
	// read-only.
	Actions Actions
	// Info fills the header.
	Info Info
	// ReadOnly disables (greys out) every action.
	ReadOnly bool
	// Protected (the context's protected) makes applying a plan ask for
	// the context's name instead of y, as the CLI's confirmation does.
	Protected bool
	// Refresh is the auto-refresh period; 0 means DefaultRefresh, a
	// negative value turns auto-refresh off (r still reads), and anything
	// below MinRefresh is raised to it.
	Refresh time.Duration
	// ReapMinIdle is the reap action's --min-idle; 0 means
	// DefaultReapMinIdle.
	ReapMinIdle time.Duration
	// Operator is who retry and skip requests are recorded as.
	Operator string
	// View is the view to start in ("partitions" when empty).
	View string
	// Now is the clock for relative times (parked age, last seen);
	// default time.Now.
	Now func() time.Time
	// Renderer styles the frame (its colour profile decides colour); nil
	// means lipgloss's default renderer (tui.NewRenderer makes one that
	// never queries the terminal).
	Renderer *lipgloss.Renderer
	// Context is the parent of every read and action; cancelled reads
	// stop. Default context.Background().
	Context context.Context
}

// mode is what the keyboard drives.
type mode int

const (
	modeList    mode = iota // a list view
	modeCommand             // the : command bar
	modeFilter              // the / filter bar
	modePrompt              // an action's question (trim's maxlen, a reason)
	modeDetail              // enter: one item explained
	modeHelp                // ?
	modeConfirm             // an action's plan, waiting for y
)

// page is one list view's state.
type page struct {
	table    table
	snap     snapshot
	filter   filterSpec
	sort     sortSpec
	loaded   bool // a read has completed once
	loading  bool // a read is in flight (at most one per view)
	seq      int
	progress int
	err      error // the last read's error; the last data stays shown
}

// prompt is a question in the bar (trim's maxlen, a reason, a protected
// context's name); submit gets the answer.
type prompt struct {
	label    string
	required bool
	submit   func(answer string) tea.Cmd
}

// Model is the dashboard: the root bubbletea model. It owns the pages
// (one per list view) and the components (header, table, bar, detail,
// help, confirm dialog) and routes keys by mode. Update never performs
// I/O: reads, plans and applies are tea.Cmds whose typed messages
// (loadMsg, explainMsg, planMsg, applyMsg) come back to Update.
type Model struct {
	opts     Options
	keys     KeyMap
	st       Styles
	refresh  time.Duration // 0: no auto-refresh
	readOnly bool
	ctx      context.Context
	cancel   context.CancelFunc

	width, height int
	mode          mode
	active        viewKind
	pages         [numViews]*page
	header        header
	input         textinput.Model
	prevFilter    filterSpec
	prompt        *prompt
	detail        *detail
	dialog        *confirm
	status        string
	statusErr     bool
	frozen        bool
	tickSeq       int
	reqs          int // sequence of explain/plan/apply requests
	quitting      bool
	// tick schedules the next auto-refresh tick (tests replace it).
	tick func(d time.Duration, seq int) tea.Cmd
}

// New returns the dashboard model. It does no I/O; the first reads start
// from Init's commands.
func New(opts Options) *Model {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Refresh == 0 {
		opts.Refresh = DefaultRefresh
	}
	auto := opts.Refresh > 0
	opts.Refresh = max(opts.Refresh, MinRefresh)
	if opts.ReapMinIdle == 0 {
		opts.ReapMinIdle = DefaultReapMinIdle
	}
	r := opts.Renderer
	if r == nil {
		r = lipgloss.DefaultRenderer()
	}
	parent := opts.Context
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithCancel(parent)
	m := &Model{
		opts:     opts,
		keys:     DefaultKeyMap(),
		st:       NewStyles(r),
		refresh:  opts.Refresh,
		readOnly: opts.ReadOnly || opts.Actions == nil,
		ctx:      ctx,
		cancel:   cancel,
		tick:     tickCmd,
	}
	if !auto {
		m.refresh = 0
		m.tick = func(time.Duration, int) tea.Cmd { return nil }
	}
	m.header = newHeader(opts.Info, m.readOnly)
	for v := range numViews {
		d := &viewDefs[v]
		m.pages[v] = &page{table: newTable(d.cols), sort: d.sort}
	}
	if v, ok := viewByName(opts.View); ok {
		m.active = v
	}
	ti := textinput.New()
	ti.Prompt = ""
	ti.PromptStyle, ti.TextStyle = r.NewStyle(), r.NewStyle()
	ti.PlaceholderStyle, ti.CompletionStyle = m.st.Status, m.st.Status
	ti.Cursor.Style, ti.Cursor.TextStyle = m.st.Selected, r.NewStyle()
	ti.Cursor.SetMode(cursor.CursorStatic)
	ti.CharLimit = 256
	m.input = ti
	// Until the terminal reports its size (a terminal always does, at
	// once), draw at the size every terminal has.
	m.setSize(80, 24)
	return m
}

// Init starts the first reads and the refresh ticker.
func (m *Model) Init() tea.Cmd {
	cmds := []tea.Cmd{m.tick(m.refresh, m.tickSeq)}
	for _, v := range m.liveViews() {
		cmds = append(cmds, m.startLoad(v))
	}
	return tea.Batch(cmds...)
}

// liveViews are refreshed on every tick: the view on screen and those
// the header sums up (partitions, parked, nodes).
func (m *Model) liveViews() []viewKind {
	views := []viewKind{m.active}
	for _, v := range []viewKind{viewPartitions, viewParked, viewNodes} {
		if v != m.active {
			views = append(views, v)
		}
	}
	return views
}

// startLoad returns the command reading view, or nil when a read of it is
// already in flight (one request per view).
func (m *Model) startLoad(v viewKind) tea.Cmd {
	p := m.pages[v]
	if p.loading {
		return nil
	}
	p.loading, p.progress = true, 0
	p.seq++
	return loadCmd(m.ctx, loadSpec{view: v, seq: p.seq, src: m.opts.Source, filter: p.filter, sort: p.sort, now: m.opts.Now})
}

// Update routes a message. It never blocks: I/O happens in the commands
// it returns.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.setSize(msg.Width, msg.Height)
		return m, nil
	case tea.KeyMsg:
		return m.handleKey(msg)
	case loadMsg:
		return m, m.onLoad(msg)
	case tickMsg:
		return m, m.onTick(msg)
	case explainMsg:
		if d := m.detail; d != nil && d.seq == msg.seq {
			d.loading = false
			if msg.err != nil {
				d.err = msg.err
			} else {
				d.setContent(explainText(&msg.detail))
			}
		}
		return m, nil
	case planMsg:
		if c := m.dialog; c != nil && c.seq == msg.seq && c.state == confirmPlanning {
			c.plan, c.err = msg.plan, msg.err
			c.state = confirmShown
			if msg.err != nil {
				c.state = confirmFailed
			}
		}
		return m, nil
	case applyMsg:
		if c := m.dialog; c != nil && c.seq == msg.seq {
			// An apply whose audit entry could not be written still shows
			// its results, with the failure as a warning.
			var rerr *repair.RecordError
			if errors.As(msg.err, &rerr) {
				c.warning, msg.err = "not recorded in the audit log: "+rerr.Err.Error(), rerr.ApplyErr
			}
			c.outcome, c.err = msg.outcome, msg.err
			if msg.plan != nil {
				c.plan = msg.plan
			}
			c.state = confirmDone
			if msg.err != nil {
				c.state = confirmFailed
			}
		}
		return m, nil
	}
	if m.mode == modeCommand || m.mode == modeFilter || m.mode == modePrompt {
		var cmd tea.Cmd
		m.input, cmd = m.input.Update(msg)
		return m, cmd
	}
	return m, nil
}

func (m *Model) onTick(msg tickMsg) tea.Cmd {
	if msg.seq != m.tickSeq || m.quitting {
		return nil
	}
	cmds := []tea.Cmd{m.tick(m.refresh, m.tickSeq)}
	if !m.frozen {
		for _, v := range m.liveViews() {
			cmds = append(cmds, m.startLoad(v))
		}
	}
	return tea.Batch(cmds...)
}

func (m *Model) onLoad(msg loadMsg) tea.Cmd {
	p := m.pages[msg.view]
	if msg.seq != p.seq {
		return msg.next // drain a stale read so its goroutine ends
	}
	if !msg.done {
		p.progress = msg.progress
		return msg.next
	}
	p.loading = false
	if msg.err != nil {
		p.err = msg.err // keep the last data on screen
		return nil
	}
	res := msg.res
	p.err, p.loaded, p.snap = nil, true, res.snap
	index := res.index
	if res.filter.text != p.filter.text || res.sort != p.sort {
		// The filter or sort changed while the read was in flight.
		index = buildIndex(viewDefs[msg.view].cols, res.rows, p.filter, p.sort, viewDefs[msg.view].idCols)
	}
	p.table.setData(res.rows, res.widths, index, viewDefs[msg.view].idCols)
	switch msg.view {
	case viewPartitions:
		m.header.setStats(res.cats, res.stats)
	case viewParked:
		m.header.parked = len(res.snap.parked)
	case viewNodes:
		m.header.nodes = len(res.snap.nodes)
	}
	return nil
}

// Layout: the header, a title line, the body, a status line and the
// bottom line (key hints or the input bar).
func (m *Model) bodyHeight() int { return max(1, m.height-m.header.lines()-3) }

func (m *Model) setSize(w, h int) {
	m.width, m.height = w, h
	m.header.width = w
	for _, p := range m.pages {
		p.table.setSize(w, m.bodyHeight()-1)
	}
	if m.detail != nil {
		m.detail.setSize(w, m.bodyHeight())
	}
	m.input.Width = max(10, w-20)
}

func (m *Model) page() *page { return m.pages[m.active] }

func (m *Model) setStatus(err bool, format string, a ...any) {
	m.status, m.statusErr = fmt.Sprintf(format, a...), err
}

func (m *Model) quit() (tea.Model, tea.Cmd) {
	m.quitting = true
	m.cancel()
	return m, tea.Quit
}

func (m *Model) handleKey(msg tea.KeyMsg) (tea.Model, tea.Cmd) {
	m.status = "" // a status message lasts until the next key
	switch m.mode {
	case modeCommand, modeFilter, modePrompt:
		return m.inputKey(msg)
	case modeHelp:
		switch {
		case key.Matches(msg, m.keys.Quit):
			return m.quit()
		case key.Matches(msg, m.keys.Back), key.Matches(msg, m.keys.Help):
			m.mode = modeList
		}
		return m, nil
	case modeConfirm:
		return m.confirmKey(msg)
	case modeDetail:
		switch {
		case key.Matches(msg, m.keys.Quit):
			return m.quit()
		case key.Matches(msg, m.keys.Back):
			m.mode, m.detail = modeList, nil
		case key.Matches(msg, m.keys.Help):
			m.mode = modeHelp
		case key.Matches(msg, m.keys.Refresh):
			return m, m.reloadDetail()
		case m.isAction(msg):
			return m.action(msg)
		default:
			m.detail.update(msg, m.keys)
		}
		return m, nil
	}

	p := m.page()
	switch {
	case key.Matches(msg, m.keys.Quit):
		return m.quit()
	case key.Matches(msg, m.keys.Help):
		m.mode = modeHelp
	case key.Matches(msg, m.keys.Command):
		m.openInput(modeCommand, "")
		m.input.ShowSuggestions = true
		m.input.SetSuggestions(viewNames())
	case key.Matches(msg, m.keys.Filter):
		m.prevFilter = p.filter
		m.openInput(modeFilter, p.filter.text)
	case key.Matches(msg, m.keys.Detail):
		return m, m.openDetail()
	case key.Matches(msg, m.keys.Back):
		if p.filter.text != "" {
			m.setFilter(filterSpec{})
		}
	case key.Matches(msg, m.keys.Refresh):
		cmd := m.startLoad(m.active)
		if cmd == nil {
			m.setStatus(false, "a read of %s is already in flight", viewDefs[m.active].name)
		}
		return m, cmd
	case key.Matches(msg, m.keys.Freeze):
		m.frozen = !m.frozen
		m.header.frozen = m.frozen
		if m.frozen {
			m.setStatus(false, "auto-refresh frozen (p resumes; r refreshes now)")
		} else {
			m.setStatus(false, "auto-refresh every %s", m.refresh)
		}
	case key.Matches(msg, m.keys.SortNext):
		cols := viewDefs[m.active].cols
		for i := 1; i <= len(cols); i++ {
			c := (p.sort.col + i) % len(cols)
			if cols[c].sort != sortNone {
				p.sort = sortSpec{col: c, desc: cols[c].desc}
				break
			}
		}
		m.reindex()
	case key.Matches(msg, m.keys.SortReverse):
		p.sort.desc = !p.sort.desc
		m.reindex()
	case m.isAction(msg):
		return m.action(msg)
	default:
		p.table.update(msg, m.keys)
	}
	return m, nil
}

func viewNames() []string {
	names := make([]string, 0, numViews+1)
	for _, d := range viewDefs {
		names = append(names, d.name)
	}
	return append(names, "quit")
}

// noServicesHint is the empty nodes view when no service was named: node
// status records are per service.
const noServicesHint = "No service given: the nodes view lists the live nodes of the services named with --service " +
	"(protctl tui --service S; protctl nodes ls lists the services)."

func (m *Model) openInput(md mode, value string) {
	m.mode = md
	// Clear the matched suggestions of an earlier command bar first:
	// textinput only recomputes them while ShowSuggestions is on, and
	// draws stale ones after the cursor (":parked" then "/x" read
	// "/xarked").
	m.input.ShowSuggestions = true
	m.input.SetValue("")
	m.input.SetSuggestions(nil)
	m.input.ShowSuggestions = false
	m.input.SetValue(value)
	m.input.CursorEnd()
	m.input.Focus()
}

func (m *Model) closeInput() {
	switch {
	case m.dialog != nil:
		m.mode = modeConfirm
	case m.detail != nil:
		m.mode = modeDetail
	default:
		m.mode = modeList
	}
	m.prompt = nil
	m.input.Blur()
	m.input.SetValue("")
}

func (m *Model) inputKey(msg tea.KeyMsg) (tea.Model, tea.Cmd) {
	switch msg.Type {
	case tea.KeyCtrlC:
		return m.quit()
	case tea.KeyEsc:
		if m.mode == modeFilter {
			m.setFilter(m.prevFilter)
		}
		m.closeInput()
		return m, nil
	case tea.KeyEnter:
		value := strings.TrimSpace(m.input.Value())
		md, pr := m.mode, m.prompt
		m.closeInput()
		switch md {
		case modeCommand:
			return m.command(value)
		case modePrompt:
			if value == "" && pr.required {
				m.setStatus(true, "%s: an answer is required; nothing was planned", strings.TrimSuffix(pr.label, ": "))
				return m, nil
			}
			return m, pr.submit(value)
		}
		return m, nil // the filter is already applied
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(msg)
	if m.mode == modeFilter {
		f, err := parseFilter(m.input.Value())
		if err != nil {
			m.setStatus(true, "invalid filter: %v", err)
		} else {
			m.setFilter(f)
		}
	}
	return m, cmd
}

// command runs a : command: a view's name (or alias), or q/quit.
func (m *Model) command(text string) (tea.Model, tea.Cmd) {
	text = strings.TrimPrefix(text, ":")
	switch text {
	case "":
		return m, nil
	case "q", "q!", "quit":
		return m.quit()
	}
	v, ok := viewByName(text)
	if !ok {
		m.setStatus(true, "unknown view %q: try :partitions, :leases, :parked, :topics or :nodes", text)
		return m, nil
	}
	m.active = v
	m.detail = nil
	m.mode = modeList
	return m, m.startLoad(v)
}

func (m *Model) setFilter(f filterSpec) {
	m.page().filter = f
	m.reindex()
}

// reindex rebuilds the active page's shown rows after a filter or sort
// change, keeping the cursor on the same row.
func (m *Model) reindex() {
	p := m.page()
	d := &viewDefs[m.active]
	p.table.setData(p.table.rows, p.table.widths, buildIndex(d.cols, p.table.rows, p.filter, p.sort, d.idCols), d.idCols)
}

// openDetail opens the selected item's detail: a partition is explained
// by the source (a command); the others are shown from the snapshot.
func (m *Model) openDetail() tea.Cmd {
	p := m.page()
	r, ok := p.table.selected()
	if !ok {
		return nil
	}
	now := m.opts.Now()
	d := newDetail("", m.width, m.bodyHeight())
	// The detail keeps its own copy of the item: a refresh replaces the
	// page's snapshot, and actions from the detail act on what it shows.
	d.view, d.row = m.active, r
	d.row.item = 0
	m.detail, m.mode = d, modeDetail
	switch m.active {
	case viewPartitions:
		pt := p.snap.partitions[r.item]
		d.snap.partitions = []*inspect.Partition{pt}
		d.title = pt.Category + "/" + pt.Key
		return m.reloadDetail()
	case viewLeases:
		l := p.snap.leases[r.item]
		d.snap.leases = []inspect.Lease{l}
		d.title = "lease of " + l.Group + " on " + l.Key
		d.setContent(leaseDetailText(&l))
	case viewParked:
		pk := p.snap.parked[r.item]
		d.snap.parked = []ledger.Parked{pk}
		d.title = pk.Subscription + "/" + pk.Aggregate
		d.setContent(parkedDetailText(&pk, now))
	case viewTopics:
		t := p.snap.topics[r.item]
		d.snap.topics = []TopicPartition{t}
		d.title = fmt.Sprintf("%s/%d", t.Topic, t.Partition)
		d.setContent(topicDetailText(&t))
	case viewNodes:
		n := p.snap.nodes[r.item]
		d.snap.nodes = []runtime.NodeStatus{n}
		d.title = n.Service + "/" + n.Node
		d.setContent(nodeDetailText(&n, now))
	}
	return nil
}

// reloadDetail explains the detail's partition again (one request at a
// time).
func (m *Model) reloadDetail() tea.Cmd {
	d := m.detail
	if d == nil || d.view != viewPartitions || d.loading {
		return nil
	}
	pt := d.snap.partitions[0]
	m.reqs++
	d.seq, d.loading = m.reqs, true
	return explainCmd(m.ctx, m.opts.Source, d.seq, pt.Category, pt.Key)
}

func (m *Model) isAction(msg tea.KeyMsg) bool {
	k := m.keys
	return key.Matches(msg, k.Reap, k.Release, k.Trim, k.SkipHead, k.ReplayDLQ, k.PurgeDLQ, k.Seek, k.Retry, k.Skip)
}

// action turns an action key into a request on the selected row (or the
// row whose detail is open), asks the prompt's question when the action
// needs an answer, and opens the confirm dialog.
func (m *Model) action(msg tea.KeyMsg) (tea.Model, tea.Cmd) {
	k := m.keys
	var b key.Binding
	for _, c := range []key.Binding{k.Reap, k.Release, k.Trim, k.SkipHead, k.ReplayDLQ, k.PurgeDLQ, k.Seek, k.Retry, k.Skip} {
		if key.Matches(msg, c) {
			b = c
		}
	}
	name := b.Help().Desc
	if m.readOnly {
		m.setStatus(true, "read-only: %s (%s) is disabled", b.Help().Key, name)
		return m, nil
	}
	view, r, snap, ok := m.activeRow()
	if !ok {
		m.setStatus(true, "%s: no row selected", name)
		return m, nil
	}
	offered := false
	for _, a := range viewActions(k, view) {
		offered = offered || key.Matches(msg, a)
	}
	if !offered {
		m.setStatus(true, "%s is not available in the %s view", name, viewDefs[view].name)
		return m, nil
	}
	switch view {
	case viewPartitions:
		pt := snap.partitions[r.item]
		base := ActionRequest{Category: pt.Category, Key: pt.Key}
		needGroup := func() bool {
			if r.group == "" {
				m.setStatus(true, "%s: partition %s has no consumer group", name, pt.Key)
				return false
			}
			return true
		}
		switch {
		case key.Matches(msg, k.Reap):
			base.Action, base.MinIdle = repair.ActionReap, m.opts.ReapMinIdle
			return m, m.openConfirm(base)
		case key.Matches(msg, k.Release):
			if !needGroup() {
				return m, nil
			}
			g, _ := pt.Group(r.group)
			base.Action, base.Group, base.Force = repair.ActionRelease, r.group, g.Lease != nil
			return m, m.openConfirm(base)
		case key.Matches(msg, k.Trim):
			m.ask(&prompt{
				label:    "trim " + pt.Stream + " to at most N entries, N: ",
				required: true,
				submit: func(a string) tea.Cmd {
					n, err := strconv.ParseInt(a, 10, 64)
					if err != nil || n <= 0 {
						m.setStatus(true, "trim: %q is not a positive number of entries; nothing was planned", a)
						return nil
					}
					return m.openConfirm(ActionRequest{Action: repair.ActionTrim, Stream: pt.Stream, MaxLen: n})
				},
			})
		case key.Matches(msg, k.ReplayDLQ):
			base.Action = repair.ActionDLQReplay
			return m, m.openConfirm(base)
		case key.Matches(msg, k.PurgeDLQ):
			base.Action = repair.ActionDLQPurge
			return m, m.openConfirm(base)
		case key.Matches(msg, k.Seek):
			if !needGroup() {
				return m, nil
			}
			m.ask(&prompt{
				label:    "seek " + r.group + " on " + pt.Key + " to (an id, an RFC 3339 time, 15m-ago, earliest, latest): ",
				required: true,
				submit: func(a string) tea.Cmd {
					if _, err := repair.ParseSeekTo(a, time.Now()); err != nil {
						m.setStatus(true, "seek: %v; nothing was planned", err)
						return nil
					}
					base.Action, base.Group, base.SeekTo = repair.ActionSeek, r.group, a
					return m.openConfirm(base)
				},
			})
		case key.Matches(msg, k.SkipHead):
			if !needGroup() {
				return m, nil
			}
			m.ask(&prompt{
				label: "dead-letter the head of " + r.group + " on " + pt.Key + ", reason (optional): ",
				submit: func(a string) tea.Cmd {
					base.Action, base.Group, base.Reason = repair.ActionDeadLetter, r.group, a
					return m.openConfirm(base)
				},
			})
		}
	case viewLeases:
		l := snap.leases[r.item]
		var category string // unknown for a lease found by a scan
		if l.Category != nil {
			category = *l.Category
		}
		return m, m.openConfirm(ActionRequest{
			Action: repair.ActionRelease, Category: category, Key: l.Key, Group: l.Group,
			Force: l.State == "held",
		})
	case viewTopics:
		tp := snap.topics[r.item]
		if r.group == "" {
			m.setStatus(true, "%s: %s/%d has no subscription", name, tp.Topic, tp.Partition)
			return m, nil
		}
		part := strconv.Itoa(int(tp.Partition))
		m.ask(&prompt{
			label:    "seek " + r.group + " on " + tp.Topic + "/" + part + " to (an offset, an RFC 3339 time, a duration ago like 15m, earliest, latest): ",
			required: true,
			submit: func(a string) tea.Cmd {
				if _, err := repair.ParseTopicSeekTo("--to", a, time.Now()); err != nil {
					m.setStatus(true, "seek: %v; nothing was planned", err)
					return nil
				}
				return m.openConfirm(ActionRequest{
					Action: repair.ActionTopicSeek, Service: tp.Service, Topic: tp.Topic, Partition: part,
					Subscription: r.group, SeekTo: a, By: m.opts.Operator,
				})
			},
		})
	case viewParked:
		pk := snap.parked[r.item]
		base := ActionRequest{Subscription: pk.Subscription, Aggregate: pk.Aggregate, By: m.opts.Operator}
		if pk.Source == source.Kafka {
			base.Partition = pk.Partition
		}
		if key.Matches(msg, k.Retry) {
			base.Action = repair.ActionRetry
			return m, m.openConfirm(base)
		}
		m.ask(&prompt{
			label:    "skip " + pk.Subscription + "/" + pk.Aggregate + ", reason: ",
			required: true,
			submit: func(a string) tea.Cmd {
				base.Action, base.Reason = repair.ActionSkip, a
				return m.openConfirm(base)
			},
		})
	}
	return m, nil
}

func (m *Model) ask(p *prompt) {
	m.openInput(modePrompt, "")
	m.prompt = p
}

// activeRow is the row an action applies to, with the snapshot its item
// index refers to: the open detail's, or the selected row of the view on
// screen.
func (m *Model) activeRow() (viewKind, row, *snapshot, bool) {
	if d := m.detail; d != nil {
		return d.view, d.row, &d.snap, true
	}
	r, ok := m.page().table.selected()
	return m.active, r, &m.page().snap, ok
}

// planMsg carries an action's plan; applyMsg its application.
type planMsg struct {
	seq  int
	plan *repair.Plan
	err  error
}

type applyMsg struct {
	seq     int
	plan    *repair.Plan
	outcome repair.Outcome
	err     error
}

// openConfirm opens the dialog and starts planning.
func (m *Model) openConfirm(req ActionRequest) tea.Cmd {
	m.reqs++
	back := modeList
	if m.detail != nil {
		back = modeDetail
	}
	c := &confirm{seq: m.reqs, req: req, cmdline: req.CommandLine(m.opts.Info.Context), state: confirmPlanning, back: back}
	m.dialog, m.mode = c, modeConfirm
	ctx, actions, seq := m.ctx, m.opts.Actions, c.seq
	return func() tea.Msg {
		p, err := actions.Plan(ctx, req)
		if err == nil && p == nil {
			err = errors.New("tui: the backend returned no plan")
		}
		return planMsg{seq: seq, plan: p, err: err}
	}
}

func (m *Model) confirmKey(msg tea.KeyMsg) (tea.Model, tea.Cmd) {
	c := m.dialog
	if msg.Type == tea.KeyCtrlC {
		return m.quit()
	}
	closeDialog := func() (tea.Model, tea.Cmd) {
		m.dialog, m.mode = nil, c.back
		if c.state != confirmDone && c.state != confirmFailed {
			return m, nil
		}
		// Something may have changed: read the view (and the detail) again.
		return m, tea.Batch(m.startLoad(m.active), m.reloadDetail())
	}
	switch c.state {
	case confirmPlanning:
		if key.Matches(msg, m.keys.Cancel) {
			return closeDialog()
		}
	case confirmShown:
		switch {
		case key.Matches(msg, m.keys.Confirm) && c.pending() > 0 && !m.readOnly:
			if m.opts.Protected {
				name := m.opts.Info.Context
				m.ask(&prompt{
					label:    fmt.Sprintf("context %q is protected; type its name to apply: ", name),
					required: true,
					submit: func(a string) tea.Cmd {
						if a != name || name == "" {
							m.setStatus(true, "declined: nothing was changed")
							return nil
						}
						return m.apply()
					},
				})
				return m, nil
			}
			return m, m.apply()
		case key.Matches(msg, m.keys.Cancel):
			return closeDialog()
		case (c.pending() == 0 || m.readOnly) && key.Matches(msg, m.keys.Detail, m.keys.Confirm):
			// Nothing to apply: enter (or y) closes, as esc does.
			return closeDialog()
		}
	case confirmApplying:
		// Apply cannot be taken back half way; wait for its results.
	case confirmDone, confirmFailed:
		if key.Matches(msg, m.keys.Cancel, m.keys.Detail, m.keys.Confirm) {
			return closeDialog()
		}
	}
	return m, nil
}

// apply starts applying the dialog's plan. Apply records results in a
// copy, so the frame never reads a plan the command is writing.
func (m *Model) apply() tea.Cmd {
	c := m.dialog
	if c == nil || c.state != confirmShown {
		return nil
	}
	c.state = confirmApplying
	ctx, actions, seq, p, cmdline := m.ctx, m.opts.Actions, c.seq, clonePlan(c.plan), c.cmdline
	return func() tea.Msg {
		outcome, err := actions.Apply(ctx, p, cmdline)
		return applyMsg{seq: seq, plan: p, outcome: outcome, err: err}
	}
}

// View renders the frame. Its cost is independent of the number of rows:
// the table renders only the rows in view.
func (m *Model) View() string {
	if m.quitting || m.width <= 0 || m.height <= 0 {
		return ""
	}
	st := &m.st
	bh := m.bodyHeight()
	p := m.page()

	var title, body, status string
	switch {
	case m.mode == modeHelp:
		title = "help"
		refresh := "off (r reads)"
		if m.refresh > 0 {
			refresh = "every " + m.refresh.String()
		}
		body = helpView(m.keys, st, m.width, bh, m.readOnly, refresh)
	case m.dialog != nil:
		title = "confirm"
		body = m.dialog.view(st, m.width, bh, m.readOnly)
	case m.detail != nil:
		d := m.detail
		title = viewDefs[d.view].name + " ▸ " + d.title
		if d.loading {
			title += " (reading…)"
		}
		body = d.render(st)
		if d.err != nil {
			status = st.Error.Render("error: " + oneLine(d.err.Error()))
		}
	default:
		title = m.listTitle()
		body = p.table.view(st, p.sort)
		if p.loaded && len(p.table.index) == 0 {
			empty := viewDefs[m.active].empty
			if sl, ok := m.opts.Source.(ServiceLister); ok && m.active == viewNodes && len(sl.NodeServices()) == 0 {
				empty = noServicesHint
			}
			if p.filter.text != "" {
				empty = "No rows match the filter (esc clears it)."
			}
			// Under the column heads: after the table's blank rows it
			// fell below the frame and was never seen.
			head, _, _ := strings.Cut(body, "\n")
			body = head + "\n" + st.Status.Render("  "+empty)
		}
		if p.err != nil {
			what := "error: " + oneLine(p.err.Error())
			if p.loaded {
				what += " (showing the last data read)"
			}
			status = st.Error.Render(what)
		}
	}
	if m.status != "" {
		if m.statusErr {
			status = st.Error.Render(m.status)
		} else {
			status = st.Status.Render(m.status)
		}
	}

	var bottom string
	switch m.mode {
	case modeCommand:
		bottom = st.Command.Render(":") + m.input.View()
	case modeFilter:
		bottom = st.Command.Render("/") + m.input.View()
	case modePrompt:
		bottom = st.Command.Render(m.prompt.label) + m.input.View()
	case modeConfirm:
		bottom = st.Status.Render("protected context: applying asks for its name")
		if !m.opts.Protected {
			bottom = ""
		}
	default:
		bottom = hintLine(m.keys, st, m.activeView(), m.readOnly, m.width)
	}

	lines := make([]string, 0, m.height)
	lines = append(lines, strings.Split(m.header.view(st), "\n")...)
	lines = append(lines, m.titleLine(title))
	lines = append(lines, fitLines(body, bh, m.width)...)
	lines = append(lines, ansi.Truncate(status, m.width, "…"), ansi.Truncate(bottom, m.width, "…"))
	return strings.Join(lines, "\n")
}

func (m *Model) activeView() viewKind {
	if m.detail != nil {
		return m.detail.view
	}
	return m.active
}

func (m *Model) listTitle() string {
	p := m.page()
	name := viewDefs[m.active].name
	shown, total := len(p.table.index), len(p.table.rows)
	var parts []string
	switch {
	case !p.loaded && p.loading:
		parts = append(parts, name+" [reading…]")
	case p.filter.text != "":
		parts = append(parts, fmt.Sprintf("%s [%s of %s]", name, count(shown), count(total)))
	default:
		parts = append(parts, fmt.Sprintf("%s [%s]", name, count(total)))
	}
	if c := viewDefs[m.active].cols; p.sort.col < len(c) && c[p.sort.col].sort != sortNone {
		dir := "↑"
		if p.sort.desc {
			dir = "↓"
		}
		parts = append(parts, "sort "+c[p.sort.col].title+dir)
	}
	if p.filter.text != "" {
		parts = append(parts, "filter /"+p.filter.text+"/")
	}
	if p.loading && p.progress > 0 {
		parts = append(parts, "reading… "+count(p.progress))
	}
	return strings.Join(parts, " ─ ")
}

func (m *Model) titleLine(title string) string {
	s := "── " + title + " "
	w := ansi.StringWidth(s)
	if w < m.width {
		s += strings.Repeat("─", m.width-w)
	}
	return m.st.ViewTitle.Render(ansi.Truncate(s, m.width, "…"))
}

// fitLines cuts or pads s to exactly n lines, each cut to width.
func fitLines(s string, n, width int) []string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	for i, l := range lines {
		lines[i] = ansi.Truncate(l, width, "…")
	}
	for len(lines) < n {
		lines = append(lines, "")
	}
	return lines
}
