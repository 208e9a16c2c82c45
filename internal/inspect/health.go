package inspect

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// healthRead is one lane's probe of a group's oldest unhandled entry.
type healthRead struct {
	part, group int
	// pending: XPENDING stream group - + 1 (id, consumer, idle,
	// deliveries); first: XRANGE stream (last-delivered + COUNT 1.
	pending, first *redis.Cmd
}

// readHealth fills Group.Health of parts (read by readLanes as lanes)
// in one more pipelined round trip, sent only for the groups with work
// waiting: per lane, the oldest pending entry (XPENDING ... COUNT 1: its
// id, idle time and delivery count) or, when nothing is pending there,
// the first entry not yet delivered (XRANGE (last-delivered + COUNT 1;
// from - when the group is not created on the lane). A caught-up group
// costs nothing. The oldest of the lanes' entries gives the lag in
// seconds, by the server's clock (w.now).
func (in *Inspector) readHealth(ctx context.Context, w *walk, parts []Partition, lanes [][2]laneRead) error {
	var reads []healthRead
	p := in.client.Pipeline()
	for i := range parts {
		for j := range parts[i].Groups {
			g := &parts[i].Groups[j]
			h := &Health{}
			if g.Lag != nil {
				h.LagEntries = ptr(g.Pending + *g.Lag)
			}
			g.Health = h
			for _, l := range lanes[i] {
				if !l.lane.Exists || l.lane.Length == 0 {
					continue
				}
				info, created := findGroup(l.groups, g.Name)
				r := healthRead{part: i, group: j}
				switch {
				case !created:
					r.first = p.Do(ctx, "xrange", l.lane.Stream, "-", "+", "count", 1)
				case info.Pending > 0:
					h.Consumers += info.Consumers
					r.pending = p.Do(ctx, "xpending", l.lane.Stream, g.Name, "-", "+", 1)
				default:
					h.Consumers += info.Consumers
					if laneLag(l.lane, info) == 0 {
						continue
					}
					r.first = p.Do(ctx, "xrange", l.lane.Stream, "("+info.LastDeliveredID, "+", "count", 1)
				}
				reads = append(reads, r)
			}
		}
	}
	if len(reads) > 0 {
		if _, err := p.Exec(ctx); pipeErr("read health", err) != nil {
			return pipeErr("read health", err)
		}
	}
	for _, r := range reads {
		h := parts[r.part].Groups[r.group].Health
		var id string
		if r.pending != nil {
			e, _ := r.pending.Val().([]any)
			if len(e) == 0 {
				continue
			}
			row, _ := e[0].([]any)
			if len(row) < 4 {
				continue
			}
			id, _ = row[0].(string)
			idle, _ := row[2].(int64)
			del, _ := row[3].(int64)
			// The main lane is drained first: its head is the head.
			if h.HeadIdleMs == nil {
				h.HeadIdleMs, h.HeadDeliveries = ptr(idle), del
			}
		} else {
			id = newestID(r.first) // COUNT 1: the only entry
		}
		if id == "" {
			continue
		}
		if h.OldestUnhandledID == nil || idCompare(id, *h.OldestUnhandledID) < 0 {
			h.OldestUnhandledID = ptr(id)
		}
	}
	for i := range parts {
		for j := range parts[i].Groups {
			g := &parts[i].Groups[j]
			h := g.Health
			if h.OldestUnhandledID != nil {
				if ms, ok := idMillis(*h.OldestUnhandledID); ok {
					h.LagSeconds = ptr(max(float64(w.now.UnixMilli()-ms), 0) / 1000)
				}
			}
			h.decide(g.Lease != nil, g.Parked != nil && *g.Parked, g.Paused != nil, w.thresholds)
		}
	}
	return nil
}

// HealthOf recomputes the status of a group read earlier with
// PartitionOptions.Health, with the operator's pause (issue 23) and the
// given thresholds; the CLI passes paused partitions it learnt from node
// status records.
func HealthOf(g *Group, paused bool, th Thresholds) {
	if g.Health == nil {
		return
	}
	g.Health.decide(g.Lease != nil, g.Parked != nil && *g.Parked, paused, th)
}
