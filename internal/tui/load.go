package tui

import (
	"context"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	tea "github.com/protctl/protctl/internal/third_party/bubbletea"
)

// loadMsg reports a view's read: progress while pages arrive (with next,
// the command that waits for the following message), then one final
// message with the result or the error.
type loadMsg struct {
	view     viewKind
	seq      int
	progress int // items read so far
	done     bool
	res      *loadResult
	err      error
	next     tea.Cmd
}

// loadResult is a complete read, with everything a frame needs already
// computed off the UI goroutine: rows and their cells, column widths, the
// shown index for the filter and sort in force when the read started, and
// (partitions) the header's per-category totals.
type loadResult struct {
	snap   snapshot
	rows   []row
	widths []int
	index  []int
	filter filterSpec
	sort   sortSpec
	cats   []string
	stats  map[string]catStats
}

// loadSpec is what a read needs, copied from the model when the read is
// started so the command never touches the model.
type loadSpec struct {
	view   viewKind
	seq    int
	src    Source
	filter filterSpec
	sort   sortSpec
	now    func() time.Time
}

// loadCmd reads view from the source. Everything, the source's calls
// included, runs when the runtime executes the command, never in Update.
// The partitions view is read a page at a time: a goroutine walks the
// pages and hands each progress report to the next command through an
// unbuffered channel, so it never runs ahead of the UI and stops when ctx
// is cancelled.
func loadCmd(ctx context.Context, ls loadSpec) tea.Cmd {
	if ls.view != viewPartitions {
		return func() tea.Msg {
			res, err := readView(ctx, ls)
			return loadMsg{view: ls.view, seq: ls.seq, done: true, res: res, err: err}
		}
	}
	return func() tea.Msg {
		ch := make(chan loadMsg)
		go readPartitions(ctx, ls, ch)
		return awaitLoad(ch)()
	}
}

func awaitLoad(ch <-chan loadMsg) tea.Cmd {
	return func() tea.Msg {
		m := <-ch
		if !m.done {
			m.next = awaitLoad(ch)
		}
		return m
	}
}

func readPartitions(ctx context.Context, ls loadSpec, ch chan<- loadMsg) {
	send := func(m loadMsg) bool {
		m.view, m.seq = ls.view, ls.seq
		select {
		case ch <- m:
			return true
		case <-ctx.Done():
			return false
		}
	}
	cols := viewDefs[ls.view].cols
	res := &loadResult{filter: ls.filter, sort: ls.sort, stats: map[string]catStats{}}
	cats, err := ls.src.Categories(ctx)
	if err != nil {
		send(loadMsg{done: true, err: err})
		return
	}
	res.cats = cats
	for _, c := range cats {
		st := res.stats[c]
		err := ls.src.Partitions(ctx, c, func(page []inspect.Partition) error {
			base := len(res.snap.partitions)
			for i := range page {
				res.snap.partitions = append(res.snap.partitions, &page[i])
			}
			rows := partitionRows(page, base)
			res.widths = naturalWidths(cols, rows, res.widths)
			res.rows = append(res.rows, rows...)
			for i := range page {
				st.add(&page[i])
			}
			if !send(loadMsg{progress: len(res.snap.partitions)}) {
				return ctx.Err()
			}
			return nil
		})
		if err != nil {
			send(loadMsg{done: true, err: err})
			return
		}
		res.stats[c] = st
	}
	if res.widths == nil {
		res.widths = naturalWidths(cols, nil, nil)
	}
	res.index = buildIndex(cols, res.rows, res.filter, res.sort, viewDefs[ls.view].idCols)
	send(loadMsg{done: true, res: res})
}

// readView reads a view that arrives in one piece.
func readView(ctx context.Context, ls loadSpec) (*loadResult, error) {
	res := &loadResult{filter: ls.filter, sort: ls.sort}
	var err error
	switch ls.view {
	case viewLeases:
		res.snap.leases, err = ls.src.Leases(ctx)
		res.rows = leaseRows(res.snap.leases)
	case viewParked:
		res.snap.parked, err = ls.src.Parked(ctx)
		res.rows = parkedRows(res.snap.parked, ls.now())
	case viewTopics:
		res.snap.topics, err = ls.src.Topics(ctx)
		res.rows = topicRows(res.snap.topics)
	case viewNodes:
		res.snap.nodes, err = ls.src.Nodes(ctx)
		res.rows = nodeRows(res.snap.nodes, ls.now())
	}
	if err != nil {
		return nil, err
	}
	cols := viewDefs[ls.view].cols
	res.widths = naturalWidths(cols, res.rows, nil)
	res.index = buildIndex(cols, res.rows, res.filter, res.sort, viewDefs[ls.view].idCols)
	return res, nil
}

// explainMsg carries Source.Explain's answer for the detail page.
type explainMsg struct {
	seq    int
	detail inspect.PartitionDetail
	err    error
}

func explainCmd(ctx context.Context, src Source, seq int, category, key string) tea.Cmd {
	return func() tea.Msg {
		d, err := src.Explain(ctx, category, key)
		return explainMsg{seq: seq, detail: d, err: err}
	}
}

// tickMsg drives auto-refresh.
type tickMsg struct{ seq int }

func tickCmd(d time.Duration, seq int) tea.Cmd {
	return tea.Tick(d, func(time.Time) tea.Msg { return tickMsg{seq: seq} })
}
