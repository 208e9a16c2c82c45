package repair

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/redisconn"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/placement"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// A plan file is the operator's to keep, and so to edit: an item's
// Allowed is the plan's verdict, not a permission. Apply never takes an
// item's Allowed true as leave to skip a guard: before it tries an item
// it derives the guards' verdict again from what the item records (its
// parameters, --force among them, and the state it saw) and, where a
// guard depends on it, the state now (refusal below, and the checks
// inside applyDeadLetter and applySeek*). An item the plan refused stays
// refused whatever else it says.
//
// The guards by action:
//
//	release         a lease held when planned, without Force
//	reap            a group's lease held when planned, without Force (the
//	                reap rules themselves are checked again by the
//	                broker's script, which refuses atomically)
//	dead-letter     an entry delivered fewer than MinDeliveries times
//	                (now), without Force (applyDeadLetter)
//	retry           an entry unrecoverable when planned (and the ledger
//	                refuses one that became so)
//	seek            a foreign owner without Force; a lane's target after
//	                its newest id, or a time before the first entry left
//	                of a trimmed lane (seekRefusals)
//	pin             a node that is not a live, active member now
//	dlq-replay      a dead letter the plan cannot replay, or a destination
//	                that is not where the dead letter belongs
//
// The other actions have no guard beyond their precondition, which the
// store checks atomically: trim (the broker recomputes the floor),
// prune-consumer, dlq-purge, skip, cordon, drain, uncordon, unpin, pause,
// resume and topic-seek.

// refusal re-derives the plan's guards for it, as described above, and
// returns why it must be refused ("" when no guard refuses it). The
// guards checked inside an action's apply are not repeated here.
func (r *Repairer) refusal(ctx context.Context, it *Item) (string, error) {
	pc, pa := it.Precondition, it.Params
	switch it.Action {
	case ActionRelease:
		if pc.Lease != nil && !pa.Force {
			return fmt.Sprintf("the lease was held by %s when planned; releasing takes the partition from its owner: plan it with --force", *pc.Lease), nil
		}
	case ActionReap:
		if pa.Force {
			return "", nil
		}
		var held []string
		for _, gl := range pc.Leases {
			if gl.Lease != nil {
				held = append(held, fmt.Sprintf("the lease of group %q was held by %s when planned", gl.Group, *gl.Lease))
			}
		}
		if len(held) > 0 {
			return strings.Join(held, "; ") + "; reaping takes the partition from its owner: plan it with --force", nil
		}
	case ActionRetry:
		if pc.Parked != nil && pc.Parked.Status == string(ledger.StatusUnrecoverable) {
			return fmt.Sprintf("the records at %s were no longer retained when planned: only a skip resolves it", pc.Parked.Position), nil
		}
	case ActionSeek:
		if pc.Seek != nil && pc.Seek.Owner == SeekOwnerForeign && !pa.Force {
			return fmt.Sprintf("the lease was held by %s, not a protctl node, when planned: seeking takes the partition from it; plan it with --force", orNone(pc.Lease)), nil
		}
	case ActionPin:
		return r.pinRefusal(ctx, it.Target)
	case ActionDLQReplay:
		return r.replayRefusal(ctx, it)
	}
	return "", nil
}

// pinRefusal is PlanPin's guard, now: a pin to a node that is not a live
// member, or is cordoned or draining, would be ignored.
func (r *Repairer) pinRefusal(ctx context.Context, t Target) (string, error) {
	st := redisstore.New(r.client)
	live, err := r.isLive(ctx, st, t.Service, t.Node)
	if err != nil {
		return "", err
	}
	if !live {
		return fmt.Sprintf("node %q is not a live member of service %q: a pin to it would be ignored", t.Node, t.Service), nil
	}
	modes, _, err := st.RawPlacement(ctx, t.Service)
	if err != nil {
		return "", err
	}
	if raw, ok := modes[t.Node]; ok {
		var rec placement.ModeRecord
		if json.Unmarshal([]byte(raw), &rec) == nil && (rec.Mode == placement.Cordoned || rec.Mode == placement.Draining) {
			return fmt.Sprintf("node %q is %s: it takes no partitions; uncordon it first", t.Node, rec.Mode), nil
		}
	}
	return "", nil
}

// replayRefusal is the replay plan's verdict on the dead letter as it is
// now: one it cannot replay is refused, and so is a destination other
// than the one the dead letter names (replayItem). A dead letter gone is
// for applyDLQReplay to report.
func (r *Repairer) replayRefusal(ctx context.Context, it *Item) (string, error) {
	t := it.Target
	d, found, err := r.inspect.ReadDeadLetter(ctx, t.Category, t.Key, t.Stream, t.ID)
	if err != nil || !found {
		return "", err
	}
	want := r.replayItem(d)
	switch {
	case !want.Allowed:
		return want.Reason, nil
	case want.Params.ReplayTo != it.Params.ReplayTo || want.Params.ReplayKey != it.Params.ReplayKey:
		return fmt.Sprintf("the plan replays it to %s, but it belongs to %s", it.Params.ReplayTo, want.Params.ReplayTo), nil
	}
	return "", nil
}

// seekRefusals re-derives the plan's lane guards of seek items, now, in
// one pipelined round trip: a lane whose target is after its newest id
// (a --to the plan refused: moving there would skip entries not yet
// written), or a time target before the first entry left of a trimmed
// lane (the replay would not start at the time). The plan clamps every
// target it allows to the lane's newest id, which only grows, so an
// allowed item passes. It returns one reason per item ("" for none).
func (r *Repairer) seekRefusals(ctx context.Context, items []*Item) ([]string, error) {
	type laneRef struct {
		item int
		ls   SeekLaneState
		cmd  *redis.XInfoStreamCmd
	}
	var refs []laneRef
	pipe := r.client.Pipeline()
	for i, it := range items {
		if it.Precondition.Seek == nil {
			continue
		}
		for _, ls := range it.Precondition.Seek.Lanes {
			if ls.From != nil {
				refs = append(refs, laneRef{item: i, ls: ls, cmd: pipe.XInfoStream(ctx, ls.Stream)})
			}
		}
	}
	out := make([]string, len(items))
	if len(refs) == 0 {
		return out, nil
	}
	cmds, err := pipe.Exec(ctx)
	if err := redisconn.ExecErr(cmds, err); err != nil {
		return nil, err
	}
	for _, ref := range refs {
		info, err := ref.cmd.Result()
		switch {
		case err != nil && (strings.Contains(err.Error(), "no such key") || strings.HasPrefix(err.Error(), "WRONGTYPE")):
			continue // gone or replaced since the plan: the seek's step says so
		case err != nil:
			return nil, err
		case out[ref.item] != "":
			continue
		}
		ls, it := ref.ls, items[ref.item]
		switch {
		case less(info.LastGeneratedID, ls.To):
			out[ref.item] = fmt.Sprintf("--to %s is after the newest id of %s (%s)", ls.To, ls.Stream, info.LastGeneratedID)
		case seekToTime(it.Params.SeekTo) && info.FirstEntry.ID != "" && info.EntriesAdded > info.Length &&
			less(ls.To, info.FirstEntry.ID) && less(ls.To, *ls.From):
			out[ref.item] = fmt.Sprintf("%s on %s: %d of its %d entries were trimmed or deleted and the first left is %s, after the time: the replay would not start at %s; use --to earliest to replay what is left",
				it.Params.SeekTo, ls.Stream, info.EntriesAdded-info.Length, info.EntriesAdded, info.FirstEntry.ID, it.Params.SeekTo)
		}
	}
	return out, nil
}

// seekToTime says a seek's params.seekTo is a time (SeekTarget.String
// of a SeekToTime target).
func seekToTime(s string) bool {
	_, err := time.Parse(time.RFC3339Nano, s)
	return err == nil
}
