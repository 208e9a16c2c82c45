package inspect

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// Status is the health word of one (partition, group) on Redis or one
// (topic partition, subscription) on Kafka: whether its work moves. It
// is computed once, by StatusOf, from what one observation (and, when
// there is one, the previous observation) shows; partitions ls/show,
// topics ls/show, check, the dashboard, the JSON documents and the
// exporter's metrics all print these words. Decision 0041 has the rules
// and why they are what they are.
//
// A Status is not a LeaseState: the lease state says who holds the
// partition, the status whether its work is done, moving or stuck.
type Status string

// Statuses, in precedence order: when several apply, the first wins.
const (
	// StatusPaused: an operator paused the partition (issue 23's pause
	// state). It wins over everything else: a pause explains why work
	// does not move, and alerts must not page for it.
	StatusPaused Status = "PAUSED"
	// StatusHalted: the head is delivered again and again (its delivery
	// count reached PoisonDeliveries) or the partition is parked in the
	// failure ledger: it will not move without an operator.
	StatusHalted Status = "HALTED"
	// StatusOrphaned: work waits, no lease is held, and the oldest
	// unhandled entry is older than OrphanAfter (longer than a lease
	// TTL): nobody took the partition.
	StatusOrphaned Status = "ORPHANED"
	// StatusStalled: work waits under a held lease and does not move: the
	// head has been pending (not redelivered, not acked) for StallAfter,
	// or successive observations saw the position still for StallAfter.
	StatusStalled Status = "STALLED"
	// StatusLagging: work waits and the oldest unhandled entry is older
	// than LaggingAfter, but it moves (or nothing says it does not).
	StatusLagging Status = "LAGGING"
	// StatusOK: a lease is held and the work is caught up or young.
	StatusOK Status = "OK"
	// StatusIdle: nothing waits (or only young work) and no lease is
	// held: released or never leased; nothing to do.
	StatusIdle Status = "IDLE"
)

// AllStatuses lists the statuses in precedence order.
func AllStatuses() []Status {
	return []Status{StatusPaused, StatusHalted, StatusOrphaned, StatusStalled, StatusLagging, StatusOK, StatusIdle}
}

// Statuses lists every status with its meaning, in precedence order,
// for documentation and help.
func Statuses() []StateInfo {
	return []StateInfo{
		{string(StatusPaused), "an operator paused the partition; wins over every other status"},
		{string(StatusHalted), "the head was delivered PoisonDeliveries (3) times or more, or the partition is parked: it will not move without an operator"},
		{string(StatusOrphaned), "work waits, no lease is held, and the oldest unhandled entry is older than OrphanAfter (1m): nobody took it"},
		{string(StatusStalled), "work waits under a held lease and does not move: the head pending for StallAfter (5m), or two observations StallAfter apart saw no progress"},
		{string(StatusLagging), "work waits, its oldest entry is older than LaggingAfter (30s), and it moves"},
		{string(StatusOK), "a lease is held and the work is caught up or younger than LaggingAfter"},
		{string(StatusIdle), "no lease is held and nothing waits (or only work younger than LaggingAfter): nothing to do"},
	}
}

// ParseStatuses parses a comma-separated list of status words (case
// insensitive), for flags; the error names the unknown word.
func ParseStatuses(s string) ([]Status, error) {
	var out []Status
	for _, w := range strings.Split(s, ",") {
		w = strings.ToUpper(strings.TrimSpace(w))
		if w == "" {
			continue
		}
		ok := false
		for _, st := range AllStatuses() {
			if Status(w) == st {
				ok = true
			}
		}
		if !ok {
			return nil, &UnknownStatusError{Word: w}
		}
		out = append(out, Status(w))
	}
	return out, nil
}

// UnknownStatusError is ParseStatuses' error for a word that is not a
// status.
type UnknownStatusError struct{ Word string }

func (e *UnknownStatusError) Error() string {
	words := make([]string, 0, 7)
	for _, s := range AllStatuses() {
		words = append(words, string(s))
	}
	return "unknown status " + strconv.Quote(e.Word) + ": want one of " + strings.Join(words, ", ")
}

// Thresholds tune StatusOf. The zero value means every default.
type Thresholds struct {
	// PoisonDeliveries is the delivery count from which a pending head
	// halts the partition. Default 3 (Protean's retry budget).
	PoisonDeliveries int64
	// LaggingAfter is the age of the oldest unhandled entry from which
	// waiting work is LAGGING rather than OK/IDLE. Default 30s.
	LaggingAfter time.Duration
	// StallAfter is how long the head may stay pending, or the position
	// stay still while work waits, before the partition is STALLED.
	// Default 5m.
	StallAfter time.Duration
	// OrphanAfter is the age of the oldest unhandled entry from which
	// work with no lease held is ORPHANED: longer than a lease TTL plus
	// a node's wait timeout. Default 1m.
	OrphanAfter time.Duration
}

func (t Thresholds) withDefaults() Thresholds {
	if t.PoisonDeliveries <= 0 {
		t.PoisonDeliveries = 3
	}
	if t.LaggingAfter <= 0 {
		t.LaggingAfter = 30 * time.Second
	}
	if t.StallAfter <= 0 {
		t.StallAfter = 5 * time.Minute
	}
	if t.OrphanAfter <= 0 {
		t.OrphanAfter = time.Minute
	}
	return t
}

// StatusInput is what StatusOf decides on: one (partition, group)
// observation, plus how long its position has been still when the caller
// keeps successive observations.
type StatusInput struct {
	// Unhandled counts entries pending or not yet delivered; LagUnknown
	// says Redis could not count them (which counts as waiting).
	Unhandled  int64
	LagUnknown bool
	// OldestAge is the age of the oldest unhandled entry (from its stream
	// id or record timestamp, on the server's clock); nil when unknown.
	OldestAge *time.Duration
	// HeadDeliveries is the delivery count of the oldest pending entry;
	// HeadIdle the time since it was last delivered (nil when nothing is
	// pending).
	HeadDeliveries int64
	HeadIdle       *time.Duration
	// Parked says the failure ledger holds the partition.
	Parked bool
	// Held says a lease is held.
	Held bool
	// Paused is the operator's pause (issue 23); false by default.
	Paused bool
	// StillFor is how long successive observations saw the position not
	// move while work waited; nil with a single observation.
	StillFor *time.Duration
}

// waiting is whether work waits.
func (in StatusInput) waiting() bool { return in.Unhandled > 0 || in.LagUnknown }

// StatusOf is the one rule behind every status word (see Status). The
// order of the checks is the precedence.
func StatusOf(in StatusInput, th Thresholds) Status {
	th = th.withDefaults()
	old := func(d time.Duration) bool { return in.OldestAge != nil && *in.OldestAge >= d }
	switch {
	case in.Paused:
		return StatusPaused
	case in.Parked, in.HeadDeliveries >= th.PoisonDeliveries:
		return StatusHalted
	case !in.waiting():
		if in.Held {
			return StatusOK
		}
		return StatusIdle
	case !in.Held && (old(th.OrphanAfter) || (in.OldestAge == nil && in.LagUnknown)):
		return StatusOrphaned
	case in.Held && in.HeadIdle != nil && *in.HeadIdle >= th.StallAfter,
		in.StillFor != nil && *in.StillFor >= th.StallAfter:
		return StatusStalled
	case old(th.LaggingAfter):
		return StatusLagging
	case in.Held:
		return StatusOK
	}
	return StatusIdle
}

// Healthy says whether s needs nobody's attention (OK, IDLE, PAUSED).
func (s Status) Healthy() bool {
	return s == StatusOK || s == StatusIdle || s == StatusPaused
}

// Observation is one reading of a (partition, group)'s backlog, kept by
// callers that read twice (the exporter, check --max-eta) to derive a
// drain rate and an ETA.
type Observation struct {
	At        time.Time
	Unhandled int64
	// Position is a value that grows when the group handles entries (the
	// oldest unhandled entry's id or offset, as text); a change means it
	// moved.
	Position string
}

// Drain is the drain rate and ETA of a backlog from two observations.
type Drain struct {
	// Rate is entries per second the backlog shrank by, net of arrivals
	// (negative when it grows).
	Rate float64
	// ETA is Unhandled / Rate of the later observation; nil when the
	// backlog does not shrink (Rate <= 0) and is not empty.
	ETA *time.Duration
}

// DrainOf derives the drain rate and ETA from prev and cur (cur later).
// ok is false when the observations are not ordered in time.
func DrainOf(prev, cur Observation) (d Drain, ok bool) {
	dt := cur.At.Sub(prev.At).Seconds()
	if dt <= 0 {
		return Drain{}, false
	}
	d.Rate = float64(prev.Unhandled-cur.Unhandled) / dt
	switch {
	case cur.Unhandled == 0:
		zero := time.Duration(0)
		d.ETA = &zero
	case d.Rate > 0:
		eta := time.Duration(math.Round(float64(cur.Unhandled) / d.Rate * float64(time.Second)))
		d.ETA = &eta
	}
	return d, true
}

// Health is the status of a (partition, group) or (topic partition,
// subscription) with the figures it was decided on; the JSON field
// "health" of partitions ls/show and topics ls/show rows (docs/cli.md).
type Health struct {
	Status Status `json:"status"`
	// LagEntries is entries pending or not yet delivered; null when
	// Redis cannot count them.
	LagEntries *int64 `json:"lagEntries"`
	// LagSeconds is the age of the oldest unhandled entry (stream id or
	// record timestamp against the server's clock); null when nothing
	// waits or it could not be read.
	LagSeconds *float64 `json:"lagSeconds"`
	// OldestUnhandledID is that entry's stream id or offset.
	OldestUnhandledID *string `json:"oldestUnhandledId"`
	// HeadDeliveries is the oldest pending entry's delivery count (0 when
	// nothing is pending).
	HeadDeliveries int64 `json:"headDeliveries"`
	// HeadIdleMs is the time since the oldest pending entry was last
	// delivered; null when nothing is pending.
	HeadIdleMs *int64 `json:"headIdleMs"`
	// Consumers is the number of consumers of the group on the lanes
	// (Redis; 0 on Kafka, where the lease owner is the only reader).
	Consumers int64 `json:"consumers"`
	// DrainRate (entries/s, net of arrivals) and ETASeconds come from two
	// observations; null with one.
	DrainRate  *float64 `json:"drainRate"`
	ETASeconds *float64 `json:"etaSeconds"`
}

// Input returns the StatusInput h was (or would be) decided on.
func (h *Health) input(held, parked bool) StatusInput {
	in := StatusInput{Held: held, Parked: parked, HeadDeliveries: h.HeadDeliveries}
	if h.LagEntries == nil {
		in.LagUnknown = true
	} else {
		in.Unhandled = *h.LagEntries
	}
	if h.LagSeconds != nil {
		d := time.Duration(*h.LagSeconds * float64(time.Second))
		in.OldestAge = &d
	}
	if h.HeadIdleMs != nil {
		d := time.Duration(*h.HeadIdleMs) * time.Millisecond
		in.HeadIdle = &d
	}
	return in
}

// Observation is h as an Observation at t.
func (h *Health) Observation(at time.Time) Observation {
	o := Observation{At: at}
	if h.LagEntries != nil {
		o.Unhandled = *h.LagEntries
	}
	if h.OldestUnhandledID != nil {
		o.Position = *h.OldestUnhandledID
	}
	return o
}

// Observe recomputes h's status and drain from a previous observation of
// the same (partition, group): the drain rate and ETA, and STALLED when
// the position did not move for th.StallAfter. stillSince is when the
// position was first seen where it is now (the caller keeps it across
// observations; the zero time when unknown). paused is the operator's
// pause.
func (h *Health) Observe(prev Observation, cur Observation, stillSince time.Time, held, parked, paused bool, th Thresholds) {
	if d, ok := DrainOf(prev, cur); ok {
		h.DrainRate = ptr(d.Rate)
		if d.ETA != nil {
			h.ETASeconds = ptr(d.ETA.Seconds())
		}
	}
	in := h.input(held, parked)
	in.Paused = paused
	if !stillSince.IsZero() && cur.Position != "" && cur.Position == prev.Position {
		still := cur.At.Sub(stillSince)
		in.StillFor = &still
	}
	h.Status = StatusOf(in, th)
}

// decide sets h.Status from one observation.
func (h *Health) decide(held, parked, paused bool, th Thresholds) {
	in := h.input(held, parked)
	in.Paused = paused
	h.Status = StatusOf(in, th)
}
