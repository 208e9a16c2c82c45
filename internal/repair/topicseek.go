package repair

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// ActionTopicSeek sets a Kafka topic subscription's checkpoint of one
// partition, backwards too (docs/decisions/0044-topic-seek.md): on a
// partition nobody holds, atomically while it is still free and at the
// checkpoint the plan saw (and the generation is bumped); on a held
// partition, by a request its owner carries out online, fenced, only
// while the lease is still the one the plan saw.
const ActionTopicSeek Action = "topic-seek"

// TopicOffsets is the Kafka side of a seek plan (*kafkasource.Source).
type TopicOffsets interface {
	inspect.Offsets
	// OffsetsForTime returns per partition the first offset whose record
	// is at or after at, the head when none is.
	OffsetsForTime(ctx context.Context, topic string, at time.Time, partitions ...int32) (map[int32]int64, error)
}

var _ TopicOffsets = (*kafkasource.Source)(nil)

// TopicSeekTo is where a seek goes: an offset, the earliest or latest offset,
// the first record at or after a time, or a shift of the checkpoint.
type TopicSeekTo struct {
	Kind   string // "offset", "earliest", "latest", "time", "shift"
	Offset int64  // offset; shift (negative rewinds)
	Time   time.Time
	// Spec is the operator's words, recorded in the plan.
	Spec string
}

// ParseTopicSeekTo reads --to: a non-negative offset, "earliest", "latest",
// an RFC 3339 time, or a duration ago ("15m": now - 15m). arg names the
// flag in the error.
func ParseTopicSeekTo(arg, s string, now time.Time) (TopicSeekTo, error) {
	bad := func(reason string) error {
		return &broker.InvalidArgumentError{Op: "seek", Arg: arg, Value: strconv.Quote(s), Reason: reason}
	}
	switch s {
	case "earliest", "latest":
		return TopicSeekTo{Kind: s, Spec: s}, nil
	case "":
		return TopicSeekTo{}, bad("want an offset, earliest, latest, an RFC 3339 time or a duration ago")
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 {
			return TopicSeekTo{}, bad("an offset must not be negative (use --shift to move back by a number of records)")
		}
		return TopicSeekTo{Kind: "offset", Offset: n, Spec: s}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return TopicSeekTo{Kind: "time", Time: t, Spec: s}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return TopicSeekTo{}, bad("a duration ago must not be negative")
		}
		return TopicSeekTo{Kind: "time", Time: now.Add(-d), Spec: s}, nil
	}
	return TopicSeekTo{}, bad("want an offset, earliest, latest, an RFC 3339 time (2026-01-02T15:04:05Z) or a duration ago (15m)")
}

// TopicSeekRequest asks to seek a subscription of a topic on some of its
// partitions.
type TopicSeekRequest struct {
	Service      string
	Topic        string
	Subscription string
	// Partitions to seek; none means every partition of the topic.
	Partitions []int32
	// To is where to go; Positions (from --from-file) instead gives each
	// partition's offset.
	To        TopicSeekTo
	Positions map[int32]int64
	By        string
	Kafka     TopicOffsets
}

// PlanTopicSeek plans one topic-seek item per partition: the checkpoint
// and lease seen, the new checkpoint, and how many records will be
// handled again or skipped. An offset outside a partition's
// [earliest, head] fails (broker.ErrInvalidArgument) naming it, except a
// shift, which is clamped (and says so); a subscription with no
// checkpoint on the topic fails with an error wrapping
// inspect.ErrNotFound.
func (r *Repairer) PlanTopicSeek(ctx context.Context, req TopicSeekRequest) (*Plan, error) {
	const op = "plan topic seek"
	g := redisstore.TopicLeaseGroup(req.Service, req.Topic)
	if err := g.Validate(); err != nil {
		return nil, err
	}
	if req.Subscription == "" {
		return nil, &broker.InvalidArgumentError{Op: op, Arg: "subscription", Value: `""`, Reason: "must not be empty"}
	}
	if req.Kafka == nil {
		return nil, fmt.Errorf("repair: %s: %w: no Kafka reader", op, broker.ErrInvalidArgument)
	}
	parts := slices.Clone(req.Partitions)
	if req.Positions != nil {
		parts = parts[:0]
		for p := range req.Positions {
			if len(req.Partitions) == 0 || slices.Contains(req.Partitions, p) {
				parts = append(parts, p)
			}
		}
		if len(parts) == 0 {
			return nil, &broker.InvalidArgumentError{Op: op, Arg: "--from-file", Value: "", Reason: "names none of the partitions asked for"}
		}
	}
	wm, err := req.Kafka.Watermarks(ctx, req.Topic, parts...)
	if errors.Is(err, kafkasource.ErrTopicNotFound) || errors.Is(err, kafkasource.ErrPartitionNotFound) {
		return nil, fmt.Errorf("%w: %w", inspect.ErrNotFound, err)
	}
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		for p := range wm {
			parts = append(parts, p)
		}
	}
	slices.Sort(parts)
	var at map[int32]int64
	if req.Positions == nil && req.To.Kind == "time" {
		if at, err = req.Kafka.OffsetsForTime(ctx, req.Topic, req.To.Time, parts...); err != nil {
			return nil, err
		}
	}

	// Leases, generations and checkpoints in one round trip.
	cpKey := g.CheckpointsKey(req.Subscription)
	pipe := r.client.Pipeline()
	exists := pipe.Exists(ctx, cpKey)
	leases := make([]*redis.StringCmd, len(parts))
	gens := make([]*redis.StringCmd, len(parts))
	cps := make([]*redis.StringCmd, len(parts))
	for i, p := range parts {
		leases[i] = pipe.Get(ctx, g.LeaseKey(p))
		gens[i] = pipe.Get(ctx, g.GenerationKey(p))
		cps[i] = pipe.HGet(ctx, cpKey, strconv.FormatInt(int64(p), 10))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("repair: %s: %w", op, err)
	}
	if exists.Val() == 0 {
		return nil, fmt.Errorf("%w: subscription %q saved no checkpoint on any partition of %q in service %q (check the spelling)",
			inspect.ErrNotFound, req.Subscription, req.Topic, req.Service)
	}

	plan := r.newPlan()
	if plan.ID, err = newPlanID(); err != nil {
		return nil, err
	}
	for i, p := range parts {
		w := wm[p]
		pre := Precondition{TopicSeek: &TopicSeekState{Earliest: strconv.FormatInt(w.Earliest, 10), Head: strconv.FormatInt(w.Head, 10)}}
		if v, err := leases[i].Result(); err == nil {
			pre.Lease = &v
		}
		if v, err := gens[i].Int64(); err == nil {
			pre.Generation = &v
		}
		var cur *int64
		if v, err := cps[i].Int64(); err == nil {
			cur = &v
			s := strconv.FormatInt(v, 10)
			pre.TopicSeek.Checkpoint = &s
		}
		target, clamped, err := seekTarget(req, p, w, cur, at)
		if err != nil {
			return nil, err
		}
		it := Item{
			Action:       ActionTopicSeek,
			Target:       Target{Service: req.Service, Topic: req.Topic, Subscription: req.Subscription, Partition: strconv.Itoa(int(p))},
			Precondition: pre,
			Params:       Params{SeekTo: strconv.FormatInt(target, 10), SeekSpec: seekSpec(req, p), By: req.By},
		}
		var move string
		switch {
		case cur == nil:
			move = fmt.Sprintf("no checkpoint yet; set it to %d", target)
		case target < *cur:
			pre.TopicSeek.HandledAgain = *cur - target
			move = fmt.Sprintf("rewind %d -> %d: %d %s handled again", *cur, target, *cur-target, plural(*cur-target))
		case target > *cur:
			pre.TopicSeek.Skipped = target - *cur
			move = fmt.Sprintf("forward %d -> %d: %d %s skipped", *cur, target, target-*cur, plural(target-*cur))
		}
		if clamped != "" {
			move += " (" + clamped + ")"
		}
		it.Precondition = pre
		switch {
		case cur != nil && *cur == target:
			it.Result = ResultSkipped
			it.Reason = fmt.Sprintf("the checkpoint is already %d: nothing to do", target)
		case pre.Lease == nil:
			it.Allowed = true
			it.Reason = move + "; the partition is free: set if it is still free and at the checkpoint seen"
		default:
			it.Allowed = true
			it.Reason = move + "; held by " + *pre.Lease + ", which carries it out online (counts are as of the plan)"
		}
		plan.Items = append(plan.Items, it)
	}
	return plan, nil
}

func plural(n int64) string {
	if n == 1 {
		return "record"
	}
	return "records"
}

func seekSpec(req TopicSeekRequest, p int32) string {
	if req.Positions != nil {
		return "from-file " + strconv.FormatInt(req.Positions[p], 10)
	}
	if req.To.Kind == "shift" {
		return "shift " + strconv.FormatInt(req.To.Offset, 10)
	}
	return req.To.Spec
}

// seekTarget is partition p's new checkpoint, and what a clamp did ("").
func seekTarget(req TopicSeekRequest, p int32, w kafkasource.Watermarks, cur *int64, at map[int32]int64) (int64, string, error) {
	inRange := func(arg, value string, n int64) (int64, string, error) {
		if n < w.Earliest || n > w.Head {
			return 0, "", &broker.InvalidArgumentError{Op: "plan topic seek", Arg: arg, Value: value,
				Reason: fmt.Sprintf("partition %d of %q holds offsets %d to %d (head %d): the offset is outside it", p, req.Topic, w.Earliest, max(w.Head-1, w.Earliest), w.Head)}
		}
		return n, "", nil
	}
	if req.Positions != nil {
		return inRange("--from-file", fmt.Sprintf("%s,%d,%d", req.Topic, p, req.Positions[p]), req.Positions[p])
	}
	switch req.To.Kind {
	case "offset":
		return inRange("--to", req.To.Spec, req.To.Offset)
	case "earliest":
		return w.Earliest, "", nil
	case "latest":
		return w.Head, "", nil
	case "time":
		return min(max(at[p], w.Earliest), w.Head), "", nil
	case "shift":
		if cur == nil {
			return 0, "", &broker.InvalidArgumentError{Op: "plan topic seek", Arg: "--shift", Value: strconv.FormatInt(req.To.Offset, 10),
				Reason: fmt.Sprintf("partition %d has no checkpoint to shift from: use --to", p)}
		}
		n := *cur + req.To.Offset
		switch {
		case n < w.Earliest:
			return w.Earliest, fmt.Sprintf("clamped to the earliest offset %d", w.Earliest), nil
		case n > w.Head:
			return w.Head, fmt.Sprintf("clamped to the head %d", w.Head), nil
		}
		return n, "", nil
	}
	return 0, "", &broker.InvalidArgumentError{Op: "plan topic seek", Arg: "--to", Value: strconv.Quote(req.To.Spec), Reason: "want --to, --shift or --from-file"}
}

// DefaultSeekWait bounds how long Apply waits for a held partition's
// owner to carry out a seek when ApplyOptions.SeekWait is zero.
const DefaultSeekWait = 30 * time.Second

// applyTopicSeek carries out a topic-seek item: see ActionTopicSeek.
func (r *Repairer) applyTopicSeek(ctx context.Context, planID string, it *Item, wait time.Duration) error {
	t := it.Target
	g := redisstore.TopicLeaseGroup(t.Service, t.Topic)
	p64, err := strconv.ParseInt(t.Partition, 10, 32)
	if err != nil {
		return fmt.Errorf("%w: partition %q", ErrInvalidPlan, t.Partition)
	}
	p := int32(p64)
	next, err := strconv.ParseInt(it.Params.SeekTo, 10, 64)
	if err != nil || next < 0 {
		return fmt.Errorf("%w: params.seekTo %q is not an offset", ErrInvalidPlan, it.Params.SeekTo)
	}
	store := redisstore.New(r.client)
	var seen *int64
	if it.Precondition.TopicSeek != nil && it.Precondition.TopicSeek.Checkpoint != nil {
		v, err := strconv.ParseInt(*it.Precondition.TopicSeek.Checkpoint, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: precondition.topicSeek.checkpoint %q", ErrInvalidPlan, *it.Precondition.TopicSeek.Checkpoint)
		}
		seen = &v
	}
	seenText := "none"
	if seen != nil {
		seenText = strconv.FormatInt(*seen, 10)
	}
	if it.Precondition.Lease == nil {
		out, err := store.SetUnownedCheckpoint(ctx, g, t.Subscription, p, seen, next)
		switch {
		case err != nil:
			return err
		case out.Lease != "":
			it.Result, it.Detail = ResultConflict, "the lease is now held by "+out.Lease+", the plan saw it free"
		case out.Moved && out.Checkpoint != nil && *out.Checkpoint == next:
			// A resumed run: an earlier run of the plan set it (the plan
			// skips a partition already at its target).
			it.Result, it.Detail = ResultDone, fmt.Sprintf("the checkpoint is already %d (set by an earlier run of this plan, or moved there since): nothing to do", next)
		case out.Moved:
			now := "none"
			if out.Checkpoint != nil {
				now = strconv.FormatInt(*out.Checkpoint, 10)
			}
			it.Result, it.Detail = ResultConflict, fmt.Sprintf("the checkpoint is now %s, the plan saw %s", now, seenText)
		default:
			it.Result, it.Detail = ResultApplied, fmt.Sprintf("checkpoint %s -> %d (generation now %d)", seenText, next, out.Generation)
		}
		return nil
	}
	token := *it.Precondition.Lease
	req := runtime.SeekRequest{ID: planID + "-" + t.Subscription + "-" + t.Partition, Next: next, From: seen, Lease: token, By: it.Params.By,
		RequestedAtMs: r.cfg.now().UnixMilli()}
	// A resumed run of the plan: the owner answered this item's request
	// already. It is reported, not requested again.
	if res, err := store.SeekResult(ctx, g, t.Subscription, p); err != nil {
		return err
	} else if res != nil && res.ID == req.ID {
		topicSeekAnswered(it, res, token, true)
		return nil
	}
	if wait <= 0 {
		wait = DefaultSeekWait
	}
	now, err := store.RequestSeek(ctx, g, t.Subscription, p, req, wait+seekRequestSlack)
	if err != nil {
		// The call may have been recorded before it failed (a Ctrl-C
		// or a lost reply): withdraw it rather than leave it behind.
		return r.withdrawTopicSeek(ctx, store, g, it, req, token, err)
	}
	switch now {
	case "":
	case redisstore.RequestAnswered:
		res, err := store.SeekResult(ctx, g, t.Subscription, p)
		if err != nil {
			return err
		}
		if res != nil && res.ID == req.ID {
			topicSeekAnswered(it, res, token, true)
			return nil
		}
		it.Result, it.Detail = ResultConflict, "the owner answered this request already, but its answer was replaced since: nothing requested"
		return nil
	default:
		if now == "-" {
			now = "free"
		}
		it.Result, it.Detail = ResultConflict, fmt.Sprintf("the lease is now %s, the plan saw %s", now, token)
		return nil
	}
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		res, err := store.SeekResult(ctx, g, t.Subscription, p)
		if err != nil {
			return r.withdrawTopicSeek(ctx, store, g, it, req, token, err)
		}
		if res != nil && res.ID == req.ID {
			topicSeekAnswered(it, res, token, false)
			return nil
		}
		if time.Now().After(deadline) {
			return r.withdrawTopicSeek(ctx, store, g, it, req, token,
				fmt.Errorf("%w: %s did not carry the seek out within %s (it stopped, is stuck in a handler, or lost the partition)", errSeekUnanswered, token, wait))
		}
		select {
		case <-ctx.Done():
			return r.withdrawTopicSeek(ctx, store, g, it, req, token, ctx.Err())
		case <-tick.C:
		}
	}
}

// seekRequestSlack is how long a topic seek request outlives the wait for
// its answer when its requester goes away without withdrawing it.
const seekRequestSlack = 30 * time.Second

// errSeekUnanswered marks the wait running out: reported as a conflict.
var errSeekUnanswered = errors.New("no answer")

// withdrawTopicSeek takes req back after the wait ended (why): if it was
// still pending, nothing changed; if the owner answered meanwhile, the
// answer is reported. Only a wait that ran out (errSeekUnanswered) ends
// in a conflict; any other why is returned once the request is
// withdrawn. The withdrawal outlives a cancelled ctx: a request left
// behind would be carried out after the operator was told it was not.
func (r *Repairer) withdrawTopicSeek(ctx context.Context, store *redisstore.Store, g redisstore.LeaseGroup, it *Item, req runtime.SeekRequest, token string, why error) error {
	t := it.Target
	p := mustPartition(t.Partition)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	withdrawn, err := store.WithdrawSeek(wctx, g, t.Subscription, p, req.ID)
	if err != nil {
		return fmt.Errorf("withdrawing the seek request after %v: %w", why, err)
	}
	if !withdrawn {
		if res, err := store.SeekResult(wctx, g, t.Subscription, p); err == nil && res != nil && res.ID == req.ID {
			topicSeekAnswered(it, res, token, false)
			return nil
		}
	}
	if !errors.Is(why, errSeekUnanswered) {
		return why
	}
	it.Result = ResultConflict
	it.Detail = strings.TrimPrefix(why.Error(), errSeekUnanswered.Error()+": ") + ": the request was withdrawn, nothing changed"
	return nil
}

// mustPartition reads a partition the caller already parsed.
func mustPartition(s string) int32 {
	p, _ := strconv.ParseInt(s, 10, 32)
	return int32(p)
}

// topicSeekAnswered records the owner's answer res in it; earlier: the
// answer was to an earlier run of the plan (ResultDone).
func topicSeekAnswered(it *Item, res *runtime.SeekResult, token string, earlier bool) {
	if res.Status != runtime.SeekDone {
		it.Result, it.Detail = ResultConflict, fmt.Sprintf("the lease is now %s, the plan saw %s: nothing changed", res.Lease, token)
		return
	}
	at := time.UnixMilli(res.AtMs).UTC().Format(time.RFC3339Nano)
	it.Result, it.Detail = ResultApplied, fmt.Sprintf("%s set the checkpoint %d -> %d online at %s", res.Lease, res.From, res.Next, at)
	if next, err := strconv.ParseInt(it.Params.SeekTo, 10, 64); err == nil && res.Next != next {
		it.Detail += fmt.Sprintf(" (it was already past the planned %d: a forward seek never moves back)", next)
	}
	if earlier {
		it.Result = ResultDone
		it.Detail += ", by an earlier run of this plan"
	}
}

// TopicPosition is one line of a --export file.
type TopicPosition struct {
	Topic     string
	Partition int32
	Offset    int64
}

// ParsePositions reads a --from-file document: CSV lines
// topic,partition,offset (kafka-consumer-groups --export's format; a
// header line "topic,partition,offset" and blank lines are allowed).
// Every line must name topic.
func ParsePositions(data, topic string) (map[int32]int64, error) {
	out := map[int32]int64{}
	bad := func(line int, text, reason string) error {
		return &broker.InvalidArgumentError{Op: "read positions", Arg: "--from-file", Value: fmt.Sprintf("line %d %q", line, text), Reason: reason}
	}
	for i, raw := range strings.Split(data, "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || (i == 0 && strings.EqualFold(line, "topic,partition,offset")) {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) != 3 {
			return nil, bad(i+1, line, "want topic,partition,offset")
		}
		if f[0] != topic {
			return nil, bad(i+1, line, fmt.Sprintf("names topic %q, not %q", f[0], topic))
		}
		p, perr := strconv.ParseInt(f[1], 10, 32)
		off, oerr := strconv.ParseInt(f[2], 10, 64)
		if perr != nil || oerr != nil || p < 0 || off < 0 {
			return nil, bad(i+1, line, "partition and offset must be non-negative integers")
		}
		if _, dup := out[int32(p)]; dup {
			return nil, bad(i+1, line, fmt.Sprintf("partition %d is listed twice", p))
		}
		out[int32(p)] = off
	}
	if len(out) == 0 {
		return nil, &broker.InvalidArgumentError{Op: "read positions", Arg: "--from-file", Value: `""`, Reason: "holds no positions"}
	}
	return out, nil
}
