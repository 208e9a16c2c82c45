package repair

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// DeadLetterMover is the broker's fenced replay and delete of one dead
// letter (redisbroker.Broker implements it). It is optional: Apply fails a
// dlq-replay or dlq-purge item on a broker without it.
type DeadLetterMover interface {
	ReplayDeadLetter(ctx context.Context, r redisbroker.DeadLetterReplay) (redisbroker.ReplayVerdict, string, error)
	DeleteDeadLetter(ctx context.Context, dlqStream, id, digest string) (redisbroker.DeleteVerdict, error)
}

var _ DeadLetterMover = (*redisbroker.Broker)(nil)

// DLQRequest asks to replay or purge the dead letters Query selects.
type DLQRequest struct {
	Action Action // ActionDLQReplay or ActionDLQPurge
	Query  inspect.DeadLetterQuery
}

// PlanDLQ plans one item per dead letter the query selects, in listing
// order (the category's own dead-letter streams, then each partition's,
// each oldest first): for a replay that is the order in which they are
// appended, so a key sees its replayed entries in that order, after
// everything already in its stream.
func (r *Repairer) PlanDLQ(ctx context.Context, req DLQRequest) (*Plan, error) {
	if req.Action != ActionDLQReplay && req.Action != ActionDLQPurge {
		return nil, &broker.InvalidArgumentError{Op: "plan dlq", Arg: "action", Value: fmt.Sprintf("%q", req.Action), Reason: `want "dlq-replay" or "dlq-purge"`}
	}
	dls, err := r.inspect.DeadLetters(ctx, req.Query)
	if err != nil {
		return nil, err
	}
	plan := r.newPlan()
	if req.Action == ActionDLQPurge {
		for _, d := range dls {
			plan.Items = append(plan.Items, Item{
				Action:       ActionDLQPurge,
				Target:       dlqTarget(d),
				Precondition: Precondition{DeadLetter: dlqState(d)},
				Allowed:      true,
				Reason:       fmt.Sprintf("delete it (%s) if it is still the entry planned; dead letters added since stay", dlqSummary(d)),
			})
		}
		return plan, nil
	}
	newest := map[string]*string{}
	for _, d := range dls {
		it := r.replayItem(d)
		if it.Allowed {
			newest[it.Params.ReplayTo] = nil
		}
		plan.Items = append(plan.Items, it)
	}
	if err := r.readNewest(ctx, newest); err != nil {
		return nil, err
	}
	for i, d := range dls {
		it := &plan.Items[i]
		if !it.Allowed {
			continue
		}
		last := newest[it.Params.ReplayTo]
		it.Precondition.LastEntryID = last
		after := "empty now"
		if last != nil {
			after = "after its newest entry " + *last
		}
		it.Reason = fmt.Sprintf("append to %s (%s) and delete it (%s): the key sees it after the entries already there, and the replayed ones in this plan's order",
			it.Params.ReplayTo, after, dlqSummary(d))
	}
	return plan, nil
}

// replayItem decides where d goes, or why it cannot be replayed.
func (r *Repairer) replayItem(d inspect.DeadLetter) Item {
	l := r.broker.Layout()
	it := Item{Action: ActionDLQReplay, Target: dlqTarget(d), Precondition: Precondition{DeadLetter: dlqState(d)}}
	switch {
	case d.Missing:
		it.Reason = "the original entry's body was gone when it was dead-lettered: there is nothing to replay (purge it)"
		return it
	case d.Key != "":
		it.Params.ReplayTo, it.Params.ReplayKey = l.Stream(d.Category, d.Key), d.Key
	case l.IsCluster():
		it.Reason = fmt.Sprintf("%s is not in a partition's cluster slot: a category's dead letter cannot be replayed atomically in the cluster layout", d.Stream)
		return it
	case d.OriginalStream == d.Category:
		// Protean's unpartitioned subscription reads the category's
		// stream, and `protean dlq replay` sends it back there too.
		it.Params.ReplayTo = d.Category
	default:
		key, ok := r.partitionOf(d.Category, d.OriginalStream)
		if !ok {
			it.Reason = fmt.Sprintf("it came from %q, which is neither %s nor one of its partitions: protctl does not know where it belongs", d.OriginalStream, d.Category)
			return it
		}
		it.Params.ReplayTo, it.Params.ReplayKey = l.Stream(d.Category, key), key
	}
	it.Allowed = true
	return it
}

// partitionOf reads the partition key of a lane of category (C:K or
// C:K:<backfill>; C:{K}... in the cluster layout).
func (r *Repairer) partitionOf(category, stream string) (string, bool) {
	l := r.broker.Layout()
	rest, ok := strings.CutPrefix(stream, category+":")
	if !ok {
		return "", false
	}
	key, suffix, has := strings.Cut(rest, ":")
	if has && suffix != r.cfg.backfill {
		return "", false
	}
	if l.IsCluster() {
		if len(key) < 3 || key[0] != '{' || key[len(key)-1] != '}' {
			return "", false
		}
		key = key[1 : len(key)-1]
	}
	return key, l.ValidateKey(key, r.cfg.backfill) == nil
}

// readNewest fills each destination stream's newest entry id (nil when
// it has none).
func (r *Repairer) readNewest(ctx context.Context, newest map[string]*string) error {
	if len(newest) == 0 {
		return nil
	}
	p := r.client.Pipeline()
	cmds := map[string]*redis.XMessageSliceCmd{}
	for s := range newest {
		cmds[s] = p.XRevRangeN(ctx, s, "+", "-", 1)
	}
	_, err := p.Exec(ctx)
	for s, c := range cmds {
		msgs, cerr := c.Result()
		if cerr != nil && !errors.Is(cerr, redis.Nil) {
			if strings.HasPrefix(cerr.Error(), "WRONGTYPE") {
				return &broker.WrongTypeError{Op: "plan dlq-replay", Key: s, Want: "stream"}
			}
			return fmt.Errorf("repair: plan dlq-replay: read %s: %w: %w", s, broker.ErrUnavailable, cerr)
		}
		if len(msgs) > 0 {
			newest[s] = &msgs[0].ID
		}
	}
	if err != nil && !errors.Is(err, redis.Nil) && !strings.HasPrefix(err.Error(), "WRONGTYPE") {
		return fmt.Errorf("repair: plan dlq-replay: %w: %w", broker.ErrUnavailable, err)
	}
	return nil
}

func dlqTarget(d inspect.DeadLetter) Target {
	return Target{Category: d.Category, Key: d.Key, Stream: d.Stream, ID: d.ID}
}

func dlqState(d inspect.DeadLetter) *DeadLetterState {
	return &DeadLetterState{Digest: d.Digest, OriginalStream: d.OriginalStream, OriginalID: d.OriginalID}
}

// dlqSummary says what a dead letter is: "of entry 5-0 of shop::order:o-1".
func dlqSummary(d inspect.DeadLetter) string {
	if d.OriginalID == "" {
		return "its origin is not recorded"
	}
	from := d.OriginalStream
	if from == "" {
		from = "an unrecorded stream"
	}
	return "dead letter of entry " + d.OriginalID + " of " + from
}

func (r *Repairer) mover() (DeadLetterMover, error) {
	m, ok := r.broker.(DeadLetterMover)
	if !ok {
		return nil, errors.New("repair: the broker cannot replay or delete dead letters")
	}
	return m, nil
}

// applyDLQReplay re-reads the dead letter and, while it is the entry
// planned, appends it to its destination and deletes it in the broker's
// one step (see doc.go).
func (r *Repairer) applyDLQReplay(ctx context.Context, it *Item) error {
	m, err := r.mover()
	if err != nil {
		return err
	}
	t, pc := it.Target, it.Precondition.DeadLetter
	if pc == nil {
		return fmt.Errorf("%w: dlq-replay item without a planned dead letter", ErrInvalidPlan)
	}
	d, found, err := r.inspect.ReadDeadLetter(ctx, t.Category, t.Key, t.Stream, t.ID)
	if err != nil {
		return err
	}
	if !found {
		return r.replayGone(ctx, it)
	}
	if d.Digest != pc.Digest {
		it.Result, it.Detail = ResultConflict, fmt.Sprintf("entry %s of %s holds other fields than the plan saw: not replayed", t.ID, t.Stream)
		return nil
	}
	origin := broker.ReplayOrigin{
		DLQStream: t.Stream, DLQID: t.ID, OriginalStream: d.OriginalStream, OriginalID: d.OriginalID,
		ReplayedAt: r.cfg.now().UTC().Format(broker.FailedAtLayout),
	}
	category := ""
	if it.Params.ReplayKey != "" {
		category = t.Category
	}
	v, id, err := m.ReplayDeadLetter(ctx, redisbroker.DeadLetterReplay{
		DLQStream: t.Stream, ID: t.ID, Digest: pc.Digest, Stream: it.Params.ReplayTo,
		Category: category, Key: it.Params.ReplayKey, Fields: broker.ReplayEntry(d.DeadLetter, origin),
	})
	if err != nil {
		return err
	}
	switch v {
	case redisbroker.ReplayDone:
		it.Result, it.Detail = ResultApplied, fmt.Sprintf("replayed to %s as %s and deleted from %s", it.Params.ReplayTo, id, t.Stream)
	case redisbroker.ReplayAlready:
		it.Result, it.Detail = ResultDone, fmt.Sprintf("already replayed, as %s, by an earlier apply: not replayed again", id)
	case redisbroker.ReplayGone:
		return r.replayGone(ctx, it)
	case redisbroker.ReplayChanged:
		it.Result, it.Detail = ResultConflict, fmt.Sprintf("entry %s of %s holds other fields than the plan saw: not replayed", t.ID, t.Stream)
	default:
		return fmt.Errorf("repair: unexpected verdict %q", v)
	}
	return nil
}

// replayGone reports a dead letter that is no longer there: replayed
// before (the broker's marker remembers it: nothing to do) or purged.
func (r *Repairer) replayGone(ctx context.Context, it *Item) error {
	t := it.Target
	prev, err := r.client.HGet(ctx, t.Stream+redisbroker.ReplayedMarkerSuffix, t.ID).Result()
	switch {
	case err == nil:
		it.Result, it.Detail = ResultDone, fmt.Sprintf("already replayed, as %s, by an earlier apply: not replayed again", prev)
	case errors.Is(err, redis.Nil), strings.HasPrefix(err.Error(), "WRONGTYPE"):
		it.Result, it.Detail = ResultConflict, fmt.Sprintf("entry %s is no longer in %s (purged, or replayed more than %s ago): nothing replayed",
			t.ID, t.Stream, fmt.Sprintf("%d days", int(redisbroker.ReplayedMemory.Hours()/24)))
	default:
		return fmt.Errorf("repair: dlq-replay: %w: %w", broker.ErrUnavailable, err)
	}
	return nil
}

// applyDLQPurge deletes the dead letter in the broker's script, only
// while it is the entry planned.
func (r *Repairer) applyDLQPurge(ctx context.Context, it *Item) error {
	m, err := r.mover()
	if err != nil {
		return err
	}
	t, pc := it.Target, it.Precondition.DeadLetter
	if pc == nil {
		return fmt.Errorf("%w: dlq-purge item without a planned dead letter", ErrInvalidPlan)
	}
	v, err := m.DeleteDeadLetter(ctx, t.Stream, t.ID, pc.Digest)
	if err != nil {
		return err
	}
	switch v {
	case redisbroker.DeleteDone:
		it.Result, it.Detail = ResultApplied, fmt.Sprintf("deleted %s from %s", t.ID, t.Stream)
	case redisbroker.DeleteGone:
		it.Result, it.Detail = ResultConflict, fmt.Sprintf("entry %s is no longer in %s: nothing deleted", t.ID, t.Stream)
	case redisbroker.DeleteChanged:
		it.Result, it.Detail = ResultConflict, fmt.Sprintf("entry %s of %s holds other fields than the plan saw: not deleted", t.ID, t.Stream)
	default:
		return fmt.Errorf("repair: unexpected verdict %q", v)
	}
	return nil
}
