package inspect

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

func (o *ExplainOptions) defaults() {
	if o.PendingLimit <= 0 {
		o.PendingLimit = 100
	}
	if o.PoisonDeliveries <= 0 {
		o.PoisonDeliveries = 3
	}
	if o.StuckAfter <= 0 {
		o.StuckAfter = time.Minute
	}
}

func (in *Inspector) explain(ctx context.Context, category, key string, opts ExplainOptions) (PartitionDetail, error) {
	const op = "explain partition"
	opts.defaults()
	if key == "" {
		return PartitionDetail{}, &broker.InvalidArgumentError{Op: op, Arg: "partition key", Value: `""`, Reason: "must not be empty"}
	}
	w, err := in.newWalk(ctx, op, category, "", false)
	if err != nil {
		return PartitionDetail{}, err
	}
	w.laneGroups = true
	parts, lanes, err := in.readLanes(ctx, w, []string{key})
	if err != nil {
		return PartitionDetail{}, err
	}
	w.thresholds = opts.Thresholds
	if err := in.readHealth(ctx, w, parts, lanes); err != nil {
		return PartitionDetail{}, err
	}
	p, lr := parts[0], lanes[0]
	if err := p.Err(); err != nil {
		// A lane of another type is not a missing lane: say which key
		// holds what, rather than explain a partition that is not there.
		return PartitionDetail{}, err
	}

	index := in.layout.IndexKey(category)
	dlq := in.layout.DLQStream(category, key)
	pipe := in.client.Pipeline()
	member := pipe.SIsMember(ctx, index, key)
	dlqLen := pipe.XLen(ctx, dlq)
	// The listing reads leases with MGET, which answers nil for a key of
	// another type; one partition can afford a TYPE of each instead.
	type leaseTypes struct{ lease, gen *redis.StatusCmd }
	lt := make([]leaseTypes, len(p.Groups))
	for gi, g := range p.Groups {
		lt[gi] = leaseTypes{pipe.Type(ctx, in.layout.LeaseKey(g.Name, key)), pipe.Type(ctx, in.layout.GenerationKey(g.Name, key))}
	}
	// Pending lists of every created group on every lane.
	type pendKey struct{ group, lane int }
	pend := map[pendKey]*redis.XPendingExtCmd{}
	for gi, g := range p.Groups {
		for li, l := range lr {
			if _, ok := findGroup(l.groups, g.Name); ok {
				pend[pendKey{gi, li}] = pipe.XPendingExt(ctx, &redis.XPendingExtArgs{
					Stream: l.lane.Stream, Group: g.Name, Start: "-", End: "+", Count: opts.PendingLimit,
				})
			}
		}
	}
	if _, err := pipe.Exec(ctx); pipeErr(op, err) != nil {
		return PartitionDetail{}, pipeErr(op, err)
	}
	indexed, err := member.Result()
	if err != nil {
		return PartitionDetail{}, wrapErr(op, index, "set", err)
	}
	if err := dlqLen.Err(); err != nil && !errors.Is(err, redis.Nil) {
		return PartitionDetail{}, wrapErr(op, dlq, "stream", err)
	}
	for gi, g := range p.Groups {
		for _, c := range []struct {
			key string
			cmd *redis.StatusCmd
		}{{in.layout.LeaseKey(g.Name, key), lt[gi].lease}, {in.layout.GenerationKey(g.Name, key), lt[gi].gen}} {
			if t := c.cmd.Val(); t != "" && t != "none" && t != "string" {
				return PartitionDetail{}, &broker.WrongTypeError{Op: op, Key: c.key, Want: "string", Got: t}
			}
		}
	}
	if !indexed && !lr[0].lane.Exists && !lr[1].lane.Exists {
		return PartitionDetail{}, fmt.Errorf("%w: category %q has no partition %q (not in %s, no stream %s)", ErrNotFound, category, key, index, p.Stream)
	}

	d := PartitionDetail{
		Category: p.Category, Key: p.Key, Stream: p.Stream, Length: p.Length,
		LastEntryID: p.LastEntryID, IdleMs: p.IdleMs, Lanes: p.Lanes,
		Indexed: indexed, DLQLength: dlqLen.Val(), ServerTime: w.now,
		Groups: make([]GroupDetail, 0, len(p.Groups)),
	}
	for gi, g := range p.Groups {
		gd := GroupDetail{Group: g, PendingEntries: []PendingEntry{}}
		if in.cfg.ledger != nil {
			_, err := in.cfg.ledger.GetParked(ctx, g.Name, "", key)
			switch {
			case err == nil:
				gd.Parked = ptr(true)
			case errors.Is(err, ledger.ErrNotParked):
				gd.Parked = ptr(false)
			default:
				return PartitionDetail{}, err
			}
			// The ledger decides released (parked) or expired.
			gd.LeaseState = LeaseStateOf(&gd.Group)
			HealthOf(&gd.Group, gd.Paused != nil, opts.Thresholds)
		}
		for li, l := range lr {
			c, ok := pend[pendKey{gi, li}]
			if !ok {
				continue
			}
			list, err := c.Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return PartitionDetail{}, wrapErr(op, l.lane.Stream, "stream", err)
			}
			for _, e := range list {
				gd.PendingEntries = append(gd.PendingEntries, PendingEntry{
					Stream: l.lane.Stream, ID: e.ID, Consumer: e.Consumer,
					IdleMs: e.Idle.Milliseconds(), Deliveries: e.RetryCount,
				})
			}
		}
		if len(gd.PendingEntries) > 0 {
			// The main lane's pending entries come first: owners drain it
			// before the backfill lane.
			head := gd.PendingEntries[0]
			gd.HeadPending = &head
			e, err := in.readEntry(ctx, head.Stream, head.ID)
			if err != nil {
				return PartitionDetail{}, err
			}
			gd.Head = &e
		} else {
			h, err := in.nextUndelivered(ctx, g.Name, lr)
			if err != nil {
				return PartitionDetail{}, err
			}
			gd.Head = h
		}
		gd.Verdict = groupVerdict(gd, lr, opts)
		d.Groups = append(d.Groups, gd)
	}
	d.Verdict = partitionVerdict(d, lr)
	return d, nil
}

// nextUndelivered reads the first entry group has not been delivered:
// main lane first, then the backfill lane.
func (in *Inspector) nextUndelivered(ctx context.Context, group string, lr [2]laneRead) (*Entry, error) {
	for _, l := range lr {
		if !l.lane.Exists || l.lane.Length == 0 {
			continue
		}
		start := "-"
		if g, ok := findGroup(l.groups, group); ok {
			start = "(" + g.LastDeliveredID
		}
		msgs, err := in.client.XRangeN(ctx, l.lane.Stream, start, "+", 1).Result()
		if err != nil {
			return nil, wrapErr("read entry", l.lane.Stream, "stream", err)
		}
		if len(msgs) > 0 {
			e := entryOf(l.lane.Stream, msgs[0])
			return &e, nil
		}
	}
	return nil, nil
}

func (in *Inspector) readEntry(ctx context.Context, stream, id string) (Entry, error) {
	msgs, err := in.client.XRangeN(ctx, stream, id, id, 1).Result()
	if err != nil {
		return Entry{}, wrapErr("read entry", stream, "stream", err)
	}
	if len(msgs) == 0 {
		return Entry{Stream: stream, ID: id, Missing: true}, nil
	}
	return entryOf(stream, msgs[0]), nil
}

// entryOf decodes an entry: the data field as an envelope when it is
// one, raw otherwise; other fields as text.
func entryOf(stream string, m redis.XMessage) Entry {
	e := Entry{Stream: stream, ID: m.ID}
	for k, v := range m.Values {
		s := fmt.Sprint(v)
		if k != broker.DataField {
			if e.Fields == nil {
				e.Fields = map[string]string{}
			}
			e.Fields[k] = s
			continue
		}
		env, err := broker.DecodeEnvelope([]byte(s))
		if err != nil {
			e.Raw = &s
			continue
		}
		e.Envelope = &env
		e.Type = env.Metadata.Headers.Type
		e.EventID = env.Metadata.Headers.ID
	}
	return e
}

// groupVerdict explains one group. See the VerdictState constants.
func groupVerdict(g GroupDetail, lr [2]laneRead, opts ExplainOptions) Verdict {
	v := Verdict{Group: g.Name}
	if !lr[0].lane.Exists && !lr[1].lane.Exists {
		v.State, v.Reason = StateOrphan, "the index names the partition but it has no stream"
		return v
	}
	if p := g.Paused; p != nil {
		v.State, v.Reason = StatePaused, pausedText(*p, g.Group)
		return v
	}
	if h := g.HeadPending; h != nil {
		idle := time.Duration(h.IdleMs) * time.Millisecond
		holder := holderText(g.Group, h.Consumer)
		switch {
		case h.Deliveries >= opts.PoisonDeliveries:
			v.State = StateStuck
			v.Reason = fmt.Sprintf("halted on a poison message: head %s delivered %d times, pending %s to consumer %s %s",
				h.ID, h.Deliveries, durationText(idle), h.Consumer, holder)
		case g.LeaseState == LeaseReleased:
			// Parked: the owner released it on purpose.
			v.State = StateStuck
			v.Reason = fmt.Sprintf("parked in the failure ledger: head %s pending %s to consumer %s (delivered %d times); lease released: waits for parked retry or skip",
				h.ID, durationText(idle), h.Consumer, h.Deliveries)
			return v
		case g.Lease == nil:
			v.State = StateStuck
			v.Reason = fmt.Sprintf("lease expired with %d pending: head %s pending %s to consumer %s (delivered %d times); no owner holds the lease",
				g.Pending, h.ID, durationText(idle), h.Consumer, h.Deliveries)
		case idle >= opts.StuckAfter:
			v.State = StateStuck
			v.Reason = fmt.Sprintf("head %s pending %s to consumer %s (delivered %d times) %s",
				h.ID, durationText(idle), h.Consumer, h.Deliveries, holder)
		default:
			v.State = StateHealthy
			v.Reason = fmt.Sprintf("working: %d pending, head %s delivered %d times, %s ago, to consumer %s %s",
				g.Pending, h.ID, h.Deliveries, durationText(idle), h.Consumer, holder)
		}
		if g.Parked != nil && *g.Parked {
			v.Reason += "; parked in the failure ledger"
		}
		return v
	}
	switch {
	case g.Lag == nil:
		v.State = StateLagging
		v.Reason = "entries were deleted from the middle of a lane: how many are not delivered yet is unknown; " + leaseText(g.Group)
	case *g.Lag > 0 && !g.Created:
		v.State = StateLagging
		v.Reason = fmt.Sprintf("the group has not read this partition yet: %d entries waiting; %s", *g.Lag, leaseText(g.Group))
	case *g.Lag > 0:
		v.State = StateLagging
		v.Reason = fmt.Sprintf("%d entries not delivered yet; %s", *g.Lag, leaseText(g.Group))
	case g.Lease != nil:
		v.State = StateHealthy
		v.Reason = "caught up; " + leaseText(g.Group)
	default:
		v.State = StateIdle
		v.Reason = "caught up; " + leaseText(g.Group)
	}
	return v
}

// holderText says whether consumer (a fence token) holds the lease.
func holderText(g Group, consumer string) string {
	switch {
	case g.Lease != nil && g.Lease.Token == consumer:
		return "whose lease is held"
	case g.Lease != nil:
		return fmt.Sprintf("while the lease is held by %s, which has not reclaimed it", g.Lease.Token)
	case g.LeaseState == LeaseReleased:
		return fmt.Sprintf("whose lease was released (generation %d, no lease held)", *g.Generation)
	case g.Generation != nil:
		return fmt.Sprintf("whose lease has expired (generation %d, no lease held)", *g.Generation)
	}
	return "and no lease was ever held"
}

// leaseText describes a group's lease.
func leaseText(g Group) string {
	switch {
	case g.Lease != nil && g.Lease.TTLMs != nil:
		return fmt.Sprintf("lease held by %s (generation %d, %s left)", g.Lease.Owner, g.Lease.Generation,
			durationText(time.Duration(*g.Lease.TTLMs)*time.Millisecond))
	case g.Lease != nil:
		return fmt.Sprintf("lease held by %s (generation %d, no expiry)", g.Lease.Owner, g.Lease.Generation)
	case g.Generation != nil:
		return "lease " + string(g.LeaseState) + " at generation " + strconv.FormatInt(*g.Generation, 10)
	}
	return "never leased"
}

var stateRank = map[VerdictState]int{StateStuck: 0, StateLagging: 1, StateOrphan: 2, StateHealthy: 3, StateIdle: 4}

// partitionVerdict is the most urgent group verdict, or a verdict of the
// partition itself when it has no group.
func partitionVerdict(d PartitionDetail, lr [2]laneRead) Verdict {
	if len(d.Groups) == 0 {
		switch {
		case !lr[0].lane.Exists && !lr[1].lane.Exists:
			return Verdict{State: StateOrphan, Reason: "the index names the partition but it has no stream"}
		case d.Length > 0:
			return Verdict{State: StateLagging, Reason: fmt.Sprintf("%d entries and no consumer group has read the partition", d.Length)}
		}
		return Verdict{State: StateIdle, Reason: "empty and no consumer group"}
	}
	best := d.Groups[0].Verdict
	for _, g := range d.Groups[1:] {
		if stateRank[g.Verdict.State] < stateRank[best.State] {
			best = g.Verdict
		}
	}
	return best
}
