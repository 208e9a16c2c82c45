package tui

import (
	"slices"
	"strings"

	"github.com/charmbracelet/x/ansi"

	"github.com/protctl/protctl/internal/present"
)

// sparkHistory is how many refreshes a category's lag sparkline shows.
const sparkHistory = 24

// header is the top of the screen: the context and endpoints, node count,
// totals over every category (partitions, leased, expired, parked, lag),
// and a lag sparkline per category, one sample per partitions refresh.
type header struct {
	info     Info
	width    int
	readOnly bool
	frozen   bool

	nodes  int // -1 until the nodes view has read once
	parked int // -1 until the parked view has read once

	cats    []string // in the order the source named them
	stats   map[string]catStats
	history map[string][]int64
}

func newHeader(info Info, readOnly bool) header {
	return header{info: info, readOnly: readOnly, nodes: -1, parked: -1, stats: map[string]catStats{}, history: map[string][]int64{}}
}

// setStats records one complete partitions read: the totals, and a new
// sample on every category's sparkline.
func (h *header) setStats(cats []string, stats map[string]catStats) {
	h.cats, h.stats = cats, stats
	for _, c := range cats {
		s := stats[c]
		hist := append(h.history[c], s.lag)
		if len(hist) > sparkHistory {
			hist = hist[len(hist)-sparkHistory:]
		}
		h.history[c] = hist
	}
	for c := range h.history {
		if !slices.Contains(cats, c) {
			delete(h.history, c)
		}
	}
}

// lines is how many lines view returns.
func (h *header) lines() int { return 3 }

func (h *header) view(st *Styles) string {
	known := func(n int) string {
		if n < 0 {
			return "?"
		}
		return count(n)
	}
	kv := func(k, v string) string { return st.Label.Render(k+" ") + st.Value.Render(v) }

	ctx := h.info.Context
	if ctx == "" {
		ctx = "-"
	}
	kafka := h.info.Kafka
	if kafka == "" {
		kafka = "-"
	}
	first := []string{st.App.Render("protctl"), kv("context", ctx), kv("redis", present.Dash(h.info.Redis))}
	if h.info.Layout != "" && h.info.Layout != "protean" {
		first = append(first, kv("layout", h.info.Layout))
	}
	first = append(first, kv("kafka", kafka), kv("nodes", known(h.nodes)))
	if h.readOnly {
		first = append(first, st.Flag.Render("READ-ONLY"))
	}
	if h.frozen {
		first = append(first, st.Flag.Render("FROZEN"))
	}

	var tot catStats
	unknown := false
	for _, c := range h.cats {
		s := h.stats[c]
		tot.partitions += s.partitions
		tot.leased += s.leased
		tot.expired += s.expired
		tot.lag += s.lag
		unknown = unknown || s.unknownLag
	}
	lag := count(tot.lag)
	if unknown {
		lag += "+?"
	}
	second := []string{
		kv("partitions", count(tot.partitions)),
		kv("leased", count(tot.leased)),
		kv("expired", count(tot.expired)),
		kv("parked", known(h.parked)),
		kv("lag", lag),
		kv("categories", count(len(h.cats))),
	}

	var third []string
	for _, c := range h.cats {
		third = append(third, st.Label.Render(ansi.Truncate(c, 24, "…"))+" "+st.Spark.Render(sparkline(h.history[c]))+" "+count(h.stats[c].lag))
	}
	if len(third) == 0 {
		third = []string{st.Label.Render("lag per category: waiting for the first read")}
	}
	return strings.Join([]string{
		h.fit(strings.Join(first, "  ")),
		h.fit(strings.Join(second, "  ")),
		h.fit(strings.Join(third, "   ")),
	}, "\n")
}

func (h *header) fit(s string) string {
	if h.width > 0 {
		return ansi.Truncate(s, h.width, "…")
	}
	return s
}

var sparkRunes = []rune("▁▂▃▄▅▆▇█")

// sparkline draws samples scaled to their maximum; a flat zero line is
// the lowest bar.
func sparkline(samples []int64) string {
	if len(samples) == 0 {
		return ""
	}
	var top int64
	for _, v := range samples {
		top = max(top, v)
	}
	var b strings.Builder
	for _, v := range samples {
		i := 0
		if top > 0 && v > 0 {
			i = int((v*int64(len(sparkRunes)-1) + top - 1) / top)
		}
		b.WriteRune(sparkRunes[min(i, len(sparkRunes)-1)])
	}
	return b.String()
}
