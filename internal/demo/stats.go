package demo

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
)

// Stats is a snapshot of the demo.
type Stats struct {
	Elapsed time.Duration
	// Published counts the events published, Poison the poison ones among
	// them.
	Published, Poison int64
	// Redis is the partitioned subscription's side, Kafka the topic
	// subscription's (nil without Kafka).
	Redis SideStats
	Kafka *SideStats
	// Parked counts the failure ledger's entries of the demo's
	// subscriptions.
	Parked int
	Nodes  []NodeStats
}

// SideStats counts one subscription's handling, over every node.
type SideStats struct {
	// Processed counts successful handler calls; Replays those that
	// handled an event again (at least once: after a handover).
	Processed, Replays int64
	// Failed counts failed handler calls (poison attempts).
	Failed int64
	// Lag counts events published and not handled yet: behind a parked
	// poison message, or still on their way.
	Lag int64
	// OrderViolations counts events handled before an earlier event of
	// their key had been: the runtime promises 0.
	OrderViolations int64
}

// NodeStats is one node's part.
type NodeStats struct {
	ID        string
	JoinState runtime.JoinState
	// Held counts the partitions whose lease the node holds now.
	Held int
	// Processed counts its successful handler calls.
	Processed int64
}

func (t *tracker) stats(published int64) (SideStats, map[string]int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	by := make(map[string]int64, len(t.byNode))
	for k, v := range t.byNode {
		by[k] = v
	}
	return SideStats{
		Processed: t.processed, Replays: t.replays, Failed: t.failures,
		Lag: published - t.handledOnce(), OrderViolations: t.violations,
	}, by
}

// Stats reads the demo's state (the ledger is read from the store: I/O
// on Redis, bounded by ctx).
func (d *Demo) Stats(ctx context.Context) Stats {
	pub := d.published.Load()
	st := Stats{Published: pub, Poison: d.poison.Load()}
	if !d.startedAt.IsZero() {
		st.Elapsed = time.Since(d.startedAt)
	}
	var byNode map[string]int64
	st.Redis, byNode = d.redis.stats(pub)
	if d.kafka != nil {
		k, kb := d.topic.stats(pub)
		st.Kafka = &k
		for n, v := range kb {
			byNode[n] += v
		}
	}
	for _, sub := range []string{Subscription, TopicSubscription} {
		if parked, err := d.reader.ListParked(ctx, sub); err == nil {
			st.Parked += len(parked)
		}
	}
	for _, n := range d.nodes {
		s := n.Status()
		st.Nodes = append(st.Nodes, NodeStats{ID: n.NodeID(), JoinState: s.JoinState, Held: len(s.Held), Processed: byNode[n.NodeID()]})
	}
	return st
}

// Line is the one-line live summary.
func (s Stats) Line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%5s  published %d (%d poison)  processed %d  failed %d  parked %d  lag %d",
		s.Elapsed.Round(time.Second), s.Published, s.Poison, s.Redis.Processed, s.Redis.Failed, s.Parked, s.Redis.Lag)
	if s.Kafka != nil {
		fmt.Fprintf(&b, "  kafka processed %d lag %d", s.Kafka.Processed, s.Kafka.Lag)
	}
	b.WriteString("  held")
	for _, n := range s.Nodes {
		fmt.Fprintf(&b, " %s:%d", n.ID, n.Held)
	}
	return b.String()
}

// Summary writes the final summary. redisURL is the Redis the demo ran
// on, empty for the in-memory demo, whose state (parked entries
// included) ends with the process: the closing line says where to look
// only when there is something left to look at.
func (s Stats) Summary(w io.Writer, backend, redisURL string) {
	fmt.Fprintf(w, "\nprotctl demo: %d nodes on %s, %s\n", len(s.Nodes), backend, s.Elapsed.Round(100*time.Millisecond))
	fmt.Fprintf(w, "  published   %d events (%d poison)\n", s.Published, s.Poison)
	side := func(name string, x SideStats) {
		fmt.Fprintf(w, "  %s\n", name)
		fmt.Fprintf(w, "    processed   %d (%d handled again after a handover)\n", x.Processed, x.Replays)
		fmt.Fprintf(w, "    failed      %d handler calls (poison messages, retried then parked)\n", x.Failed)
		fmt.Fprintf(w, "    lag         %d events not handled yet\n", x.Lag)
		order := "kept"
		if x.OrderViolations > 0 {
			order = "BROKEN"
		}
		fmt.Fprintf(w, "    order       %s per key (%d violations)\n", order, x.OrderViolations)
	}
	side(Subscription+" (Redis partitions)", s.Redis)
	if s.Kafka != nil {
		side(TopicSubscription+" (Kafka topic "+Topic+")", *s.Kafka)
	}
	if redisURL != "" {
		fmt.Fprintf(w, "  parked      %d (left on Redis: protctl parked ls --redis %s; retry or skip them with protctl parked retry|skip)\n", s.Parked, redisURL)
	} else {
		fmt.Fprintf(w, "  parked      %d (in memory, gone now the demo ended; run it with --redis URL to inspect and repair them with protctl parked ls|retry|skip)\n", s.Parked)
	}
	for _, n := range s.Nodes {
		fmt.Fprintf(w, "  %-10s  %d processed\n", n.ID, n.Processed)
	}
}

// Report prints s.Line every period to w until ctx ends.
func (d *Demo) Report(ctx context.Context, w io.Writer, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// Not ctx: the last line, at the deadline, must still read
			// the ledger.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), every)
			fmt.Fprintln(w, d.Stats(sctx).Line())
			cancel()
		}
	}
}
