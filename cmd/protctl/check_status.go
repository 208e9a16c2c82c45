package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
)

// statusChecks says whether a check of the status model (#21) runs.
func (o *checkOptions) statusChecks() bool {
	return len(o.statuses) > 0 || o.MaxLagSeconds > 0 || o.MaxETA > 0
}

// checkStatuses runs --fail-on-status, --max-lag-seconds and --max-eta
// over a listing read with PartitionOptions.Health. --max-eta reads the
// categories a second time, --eta-sample later, and derives each
// backlog's drain rate from the two readings (inspect.DrainOf).
func checkStatuses(ctx context.Context, opts *checkOptions, ins *inspect.Inspector, cats []string, parts []inspect.Partition) ([]checkResult, error) {
	name := func(p *inspect.Partition, g *inspect.Group) string {
		return p.Category + " " + p.Key + " " + g.Name
	}
	var out []checkResult
	if len(opts.statuses) > 0 {
		var n int64
		words := ""
		for i, s := range opts.statuses {
			if i > 0 {
				words += ","
			}
			words += string(s)
		}
		res := checkResult{Name: "status", OK: true, Limit: 0, Unit: "count", Offenders: []string{}}
		for i := range parts {
			p := &parts[i]
			for j := range p.Groups {
				g := &p.Groups[j]
				if g.Health == nil || !slices.Contains(opts.statuses, g.Health.Status) {
					continue
				}
				n++
				res.offend(fmt.Sprintf("%s: %s (%s)", name(p, g), g.Health.Status, healthText(g.Health)))
			}
		}
		entries := 0
		if slices.Contains(opts.statuses, inspect.StatusPaused) && (len(opts.Categories) == 0 || len(opts.Services) > 0) {
			// Kafka topic subscriptions' pauses: their entries name
			// aggregates (or all), whose partitions are not known without
			// reading the records, so each entry is one PAUSED offender.
			pauses, err := ins.TopicPauses(ctx, opts.Services)
			if err != nil {
				return nil, dataErr(err)
			}
			for _, tp := range pauses {
				n++
				entries++
				res.offend(fmt.Sprintf("%s topic %s %s %s: %s (%s)", tp.Service, tp.Topic, tp.Subscription, tp.Selector,
					inspect.StatusPaused, inspect.PauseText(tp.Entry)))
			}
		}
		res.Value = &n
		res.Detail = fmt.Sprintf("%d partitions %s", n-int64(entries), words)
		if entries > 0 {
			res.Detail += fmt.Sprintf(", %d Kafka pause entries", entries)
		}
		out = append(out, res)
	}
	if opts.MaxLagSeconds > 0 {
		limit := opts.MaxLagSeconds.Milliseconds()
		var worst int64
		res := checkResult{Name: "lagSeconds", OK: true, Limit: limit, Unit: "ms", Offenders: []string{}}
		for i := range parts {
			p := &parts[i]
			for j := range p.Groups {
				g := &p.Groups[j]
				if g.Health == nil || g.Health.LagSeconds == nil {
					continue
				}
				ms := int64(*g.Health.LagSeconds * 1000)
				worst = max(worst, ms)
				if ms > limit {
					res.offend(fmt.Sprintf("%s: oldest unhandled entry %s old", name(p, g), output.HumanDuration(msDuration(ms))))
				}
			}
		}
		res.Value = &worst
		res.Detail = "oldest unhandled entry " + output.HumanDuration(msDuration(worst)) + " old"
		out = append(out, res)
	}
	if opts.MaxETA > 0 {
		res, err := checkETA(ctx, opts, ins, cats, parts)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}

// healthText is the figures behind a status, for offenders.
func healthText(h *inspect.Health) string {
	s := "lag " + quantity(h.LagEntries, "count")
	if h.LagSeconds != nil {
		s += ", oldest " + output.HumanDuration(time.Duration(*h.LagSeconds*float64(time.Second)))
	}
	if h.HeadDeliveries > 0 {
		s += fmt.Sprintf(", head delivered %d times", h.HeadDeliveries)
	}
	return s
}

func checkETA(ctx context.Context, opts *checkOptions, ins *inspect.Inspector, cats []string, first []inspect.Partition) (checkResult, error) {
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return checkResult{}, ctx.Err()
	case <-time.After(opts.ETASample):
	}
	second, err := readPartitions(ctx, opts.IO, ins, cats, inspect.PartitionOptions{Health: true, Thresholds: opts.Thresholds})
	if err != nil {
		return checkResult{}, err
	}
	t1 := time.Now()
	type gk struct{ cat, key, group string }
	before := map[gk]*inspect.Health{}
	for i := range first {
		for j := range first[i].Groups {
			g := &first[i].Groups[j]
			before[gk{first[i].Category, first[i].Key, g.Name}] = g.Health
		}
	}
	limit := opts.MaxETA.Milliseconds()
	var worst int64
	res := checkResult{Name: "eta", OK: true, Limit: limit, Unit: "ms", Offenders: []string{}}
	for i := range second {
		p := &second[i]
		for j := range p.Groups {
			g := &p.Groups[j]
			h, prev := g.Health, before[gk{p.Category, p.Key, g.Name}]
			if h == nil || prev == nil || h.LagEntries == nil || *h.LagEntries == 0 {
				continue
			}
			d, _ := inspect.DrainOf(prev.Observation(t0), h.Observation(t1))
			if d.ETA == nil {
				res.offend(fmt.Sprintf("%s %s %s: %d waiting and not draining (%.1f/s)", p.Category, p.Key, g.Name, *h.LagEntries, d.Rate))
				continue
			}
			ms := d.ETA.Milliseconds()
			worst = max(worst, ms)
			if ms > limit {
				res.offend(fmt.Sprintf("%s %s %s: %d waiting, draining %.1f/s: ETA %s", p.Category, p.Key, g.Name, *h.LagEntries, d.Rate, output.HumanDuration(*d.ETA)))
			}
		}
	}
	res.Value = &worst
	res.Detail = fmt.Sprintf("longest ETA %s over %s", output.HumanDuration(msDuration(worst)), output.HumanDuration(opts.ETASample))
	return res, nil
}
