//go:build unix

package bench

import (
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/protctl/protctl/internal/inspect"
	tea "github.com/protctl/protctl/internal/third_party/bubbletea"
	"github.com/protctl/protctl/internal/tui"
)

// The dashboard's frame cost with 100,000 partitions: the partitions view
// is virtualised (a frame renders the rows in view only), so View must
// stay far under the 50 ms target whatever the row count. The figures and
// the command are in docs/benchmarks.md, "Dashboard benchmarks":
//
//	go test -run '^$' -bench BenchmarkTUI -benchtime 2s ./bench/

const tuiRows = 100_000

func tuiPartitions(n int) []inspect.Partition {
	ptr := func(v int64) *int64 { return &v }
	parts := make([]inspect.Partition, n)
	for i := range parts {
		key := fmt.Sprintf("order-%06d", i)
		last := fmt.Sprintf("1772366396000-%d", i%7)
		p := inspect.Partition{
			Category: "shop::order", Key: key, Stream: "shop::order:" + key, Length: int64(i % 50),
			LastEntryID: &last, IdleMs: ptr(int64(i%3600) * 1000),
			Lanes: []inspect.Lane{{Name: "main", Stream: "shop::order:" + key, Exists: true, Length: int64(i % 50), LastEntryID: &last}},
		}
		g := inspect.Group{Name: "app.OrderProjector", Pending: int64(i % 3), Lag: ptr(int64(i % 11)), Generation: ptr(int64(i % 9)), Created: true}
		if i%4 != 0 {
			g.Lease = &inspect.LeaseInfo{Owner: fmt.Sprintf("node-%d", i%3), Generation: int64(i % 9), TTLMs: ptr(int64(i%30) * 1000), Token: "x"}
		}
		p.Groups = []inspect.Group{g}
		parts[i] = p
	}
	return parts
}

// newTUIModel returns a dashboard at 120x30, with colour (ANSI 256),
// whose partitions view holds n rows, read through a MemorySource.
func newTUIModel(tb testing.TB, n int) *tui.Model {
	tb.Helper()
	src := tui.NewMemorySource(1000)
	src.SetPartitions("shop::order", tuiPartitions(n))
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.ANSI256)
	m := tui.New(tui.Options{Source: src, Refresh: -1, Renderer: r, Now: func() time.Time { return time.Unix(1772366400, 0) }})
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 30})
	runTUI(tb, m, m.Init())
	if v := m.View(); !strings.Contains(v, fmt.Sprintf("partitions [%s]", thousands(n))) {
		tb.Fatalf("the view did not load %d rows:\n%s", n, v)
	}
	return m
}

func thousands(n int) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// runTUI runs cmd and the commands its messages lead to.
func runTUI(tb testing.TB, m *tui.Model, cmd tea.Cmd) {
	queue := []tea.Cmd{cmd}
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		if c == nil {
			continue
		}
		msg := c()
		if b, ok := msg.(tea.BatchMsg); ok {
			queue = append(queue, b...)
			continue
		}
		_, next := m.Update(msg)
		queue = append(queue, next)
	}
}

func key(k string) tea.KeyMsg {
	switch k {
	case "pgdown":
		return tea.KeyMsg{Type: tea.KeyPgDown}
	case "backspace":
		return tea.KeyMsg{Type: tea.KeyBackspace}
	}
	return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
}

// cpuClock is the process's user+system CPU time. On a shared machine
// the wall time per frame includes waiting for a CPU; the CPU time per
// frame is the work the frame costs.
func cpuClock() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure runs body b.N times and reports wall and CPU milliseconds per
// op under unit (e.g. "frame").
func measure(b *testing.B, unit string, body func()) {
	start := cpuClock()
	for b.Loop() {
		body()
	}
	cpu := cpuClock() - start
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/"+unit)
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1e6, "cpu-ms/"+unit)
}

// BenchmarkTUIPartitionsView renders frames of the partitions view with
// 100,000 rows: still, scrolling a row at a time, and a page at a time.
func BenchmarkTUIPartitionsView(b *testing.B) {
	m := newTUIModel(b, tuiRows)
	b.Run("View", func(b *testing.B) {
		measure(b, "frame", func() { _ = m.View() })
	})
	b.Run("ScrollRowAndView", func(b *testing.B) {
		down := key("j")
		measure(b, "frame", func() {
			m.Update(down)
			_ = m.View()
		})
	})
	b.Run("PageDownAndView", func(b *testing.B) {
		pg := key("pgdown")
		measure(b, "frame", func() {
			m.Update(pg)
			_ = m.View()
		})
	})
}

// BenchmarkTUIFilterKeystroke is one keystroke of the / filter over
// 100,000 rows: the shown index is rebuilt (one regex match per row) and
// a frame rendered. This is the one per-key cost that grows with the row
// count.
func BenchmarkTUIFilterKeystroke(b *testing.B) {
	m := newTUIModel(b, tuiRows)
	m.Update(key("/"))
	m.Update(key("0"))
	m.Update(key("7"))
	add, del := key("3"), key("backspace")
	i := 0
	measure(b, "frame", func() {
		if i%2 == 0 {
			m.Update(add)
		} else {
			m.Update(del)
		}
		i++
		_ = m.View()
	})
}

// BenchmarkTUIRefresh is a whole refresh of the partitions view with
// 100,000 rows from memory: the pages read, the rows and widths built and
// the index sorted (in the command's goroutine), and the swap in Update.
func BenchmarkTUIRefresh(b *testing.B) {
	m := newTUIModel(b, tuiRows)
	r := key("r")
	measure(b, "refresh", func() {
		_, cmd := m.Update(r)
		runTUI(b, m, cmd)
	})
}
