package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
)

// statusChecks says whether a check of the status model (#21) runs.
func (o *checkOptions) statusChecks() bool {
	return len(o.statuses) > 0 || o.MaxLagSeconds > 0 || o.MaxETA > 0
}

// healthRow is one (partition, group) or (topic partition,
// subscription) with its status, named as an offender names it.
type healthRow struct {
	name string
	h    *inspect.Health
}

// partitionRows are the listing's groups with a Health.
func partitionRows(parts []inspect.Partition) []healthRow {
	var rows []healthRow
	for i := range parts {
		p := &parts[i]
		for j := range p.Groups {
			if g := &p.Groups[j]; g.Health != nil {
				rows = append(rows, healthRow{p.Category + " " + p.Key + " " + g.Name, g.Health})
			}
		}
	}
	return rows
}

// topicHealthRows are the topics' subscriptions with a Health, named
// "SERVICE/TOPIC PARTITION SUBSCRIPTION".
func topicHealthRows(topics []inspect.Topic) []healthRow {
	var rows []healthRow
	for _, t := range topics {
		for _, p := range t.Partitions {
			for k := range p.Subscriptions {
				if s := &p.Subscriptions[k]; s.Health != nil {
					rows = append(rows, healthRow{t.Service + "/" + t.Topic + " " + strconv.FormatInt(int64(p.Partition), 10) + " " + s.Name, s.Health})
				}
			}
		}
	}
	return rows
}

// checkStatuses runs --fail-on-status, --max-lag-seconds and --max-eta
// over a listing read with PartitionOptions.Health. --max-eta reads the
// categories a second time, --eta-sample later, and derives each
// backlog's drain rate from the two readings (inspect.DrainOf).
func checkStatuses(ctx context.Context, opts *checkOptions, ins *inspect.Inspector, cats []string, parts []inspect.Partition) ([]checkResult, error) {
	out := statusResults(opts, "", partitionRows(parts))
	if opts.MaxETA > 0 {
		t0 := time.Now()
		if err := sleepCtx(ctx, opts.ETASample); err != nil {
			return nil, err
		}
		second, err := readPartitions(ctx, opts.IO, ins, cats, inspect.PartitionOptions{Health: true, Thresholds: opts.Thresholds})
		if err != nil {
			return nil, err
		}
		out = append(out, etaResult(opts, "eta", partitionRows(parts), partitionRows(second), t0, time.Now()))
	}
	return out, nil
}

// statusResults is the status and lagSeconds checks over rows; prefix
// names them ("" for Redis partitions, "topic" for Kafka topics).
func statusResults(opts *checkOptions, prefix string, rows []healthRow) []checkResult {
	named := func(s string) string {
		if prefix == "" {
			return s
		}
		return prefix + strings.ToUpper(s[:1]) + s[1:]
	}
	var out []checkResult
	if len(opts.statuses) > 0 {
		var n int64
		words := make([]string, len(opts.statuses))
		for i, s := range opts.statuses {
			words[i] = string(s)
		}
		res := checkResult{Name: named("status"), OK: true, Limit: 0, Unit: "count", Offenders: []string{}}
		for _, r := range rows {
			if !slices.Contains(opts.statuses, r.h.Status) {
				continue
			}
			n++
			res.offend(fmt.Sprintf("%s: %s (%s)", r.name, r.h.Status, healthText(r.h)))
		}
		res.Value = &n
		res.Detail = fmt.Sprintf("%d partitions %s", n, strings.Join(words, ","))
		out = append(out, res)
	}
	if opts.MaxLagSeconds > 0 {
		limit := opts.MaxLagSeconds.Milliseconds()
		var worst int64
		res := checkResult{Name: named("lagSeconds"), OK: true, Limit: limit, Unit: "ms", Offenders: []string{}}
		for _, r := range rows {
			if r.h.LagSeconds == nil {
				continue
			}
			ms := int64(*r.h.LagSeconds * 1000)
			worst = max(worst, ms)
			if ms > limit {
				res.offend(fmt.Sprintf("%s: oldest unhandled entry %s old", r.name, output.HumanDuration(msDuration(ms))))
			}
		}
		res.Value = &worst
		res.Detail = "oldest unhandled entry " + output.HumanDuration(msDuration(worst)) + " old"
		out = append(out, res)
	}
	return out
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

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// etaResult is the --max-eta check from two readings, first at t0 and
// second at t1, matched by name.
func etaResult(opts *checkOptions, checkName string, first, second []healthRow, t0, t1 time.Time) checkResult {
	before := map[string]*inspect.Health{}
	for _, r := range first {
		before[r.name] = r.h
	}
	limit := opts.MaxETA.Milliseconds()
	var worst int64
	res := checkResult{Name: checkName, OK: true, Limit: limit, Unit: "ms", Offenders: []string{}}
	for _, r := range second {
		h, prev := r.h, before[r.name]
		if prev == nil || h.LagEntries == nil || *h.LagEntries == 0 {
			continue
		}
		d, _ := inspect.DrainOf(prev.Observation(t0), h.Observation(t1))
		if d.ETA == nil {
			res.offend(fmt.Sprintf("%s: %d waiting and not draining (%.1f/s)", r.name, *h.LagEntries, d.Rate))
			continue
		}
		ms := d.ETA.Milliseconds()
		worst = max(worst, ms)
		if ms > limit {
			res.offend(fmt.Sprintf("%s: %d waiting, draining %.1f/s: ETA %s", r.name, *h.LagEntries, d.Rate, output.HumanDuration(*d.ETA)))
		}
	}
	res.Value = &worst
	res.Detail = fmt.Sprintf("longest ETA %s over %s", output.HumanDuration(msDuration(worst)), output.HumanDuration(opts.ETASample))
	return res
}

// checkTopics runs the status checks (--fail-on-status,
// --max-lag-seconds, --max-eta) over the --topic topics' subscriptions,
// as checkStatuses does over Redis groups: the checks topicStatus,
// topicLagSeconds and topicEta, offenders named "SERVICE/TOPIC PARTITION
// SUBSCRIPTION".
func checkTopics(ctx context.Context, opts *checkOptions, ins *inspect.Inspector) ([]checkResult, error) {
	src, err := opts.Kafka()
	if err != nil {
		return nil, err
	}
	defer src.Close()
	read := func() ([]healthRow, error) {
		var topics []inspect.Topic
		for _, st := range opts.Topics {
			service, topic, _ := strings.Cut(st, "/")
			t, err := ins.Topic(ctx, src, service, topic, inspect.TopicOptions{Subscriptions: opts.Subscriptions, Health: true, Thresholds: opts.Thresholds})
			if err != nil {
				return nil, loginHint(topicsErr(err), opts.Settings)
			}
			// A misspelt service or subscription would pass (no rows):
			// exit 4 as topics ls does.
			if err := requireTopicNames(ctx, ins, &topicsOptions{Service: service}, []inspect.Topic{t}); err != nil {
				return nil, err
			}
			topics = append(topics, t)
		}
		if len(opts.Subscriptions) > 0 {
			service, _, _ := strings.Cut(opts.Topics[0], "/")
			if err := requireTopicNames(ctx, ins, &topicsOptions{Service: service, Subscriptions: opts.Subscriptions}, topics); err != nil {
				return nil, err
			}
		}
		return topicHealthRows(topics), nil
	}
	first, err := read()
	if err != nil {
		return nil, err
	}
	out := statusResults(opts, "topic", first)
	if opts.MaxETA > 0 {
		t0 := time.Now()
		if err := sleepCtx(ctx, opts.ETASample); err != nil {
			return nil, err
		}
		second, err := read()
		if err != nil {
			return nil, err
		}
		out = append(out, etaResult(opts, "topicEta", first, second, t0, time.Now()))
	}
	return out, nil
}
