package present

import (
	"fmt"
	"strings"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/repair"
)

// Seen sums up the state a plan item was planned against, the fence it
// is applied on (the SEEN column): "lease worker-1:5", "floor 1-2
// pinned by g; removes 3 of 10", "-" when the item saw nothing to show.
func Seen(it repair.Item) string {
	pc := it.Precondition
	var parts []string
	switch it.Action {
	case repair.ActionTrim:
		if t := pc.Trim; t != nil {
			floor := "none"
			if t.Floor != nil {
				floor = *t.Floor
			}
			s := "floor " + floor
			if t.PinnedBy != nil {
				s += " pinned by " + *t.PinnedBy
			}
			parts = append(parts, s, fmt.Sprintf("removes %d of %d", t.Removes, t.Length))
		}
	case repair.ActionRetry, repair.ActionSkip:
		if ps := pc.Parked; ps != nil {
			parts = append(parts, fmt.Sprintf("%s at %s, %d attempts", ps.Status, ps.Position, ps.Attempts))
		}
	case repair.ActionDeadLetter:
		if pe := pc.Pending; pe != nil {
			parts = append(parts, fmt.Sprintf("delivered %d times to %s", pe.Deliveries, pe.Consumer))
		}
	case repair.ActionDLQReplay, repair.ActionDLQPurge:
		if dl := pc.DeadLetter; dl != nil && dl.OriginalID != "" {
			parts = append(parts, "dead letter of "+dl.OriginalID)
		}
		if it.Action == repair.ActionDLQReplay && pc.LastEntryID != nil {
			parts = append(parts, "newest of "+it.Params.ReplayTo+" "+*pc.LastEntryID)
		}
	case repair.ActionTopicSeek:
		if sk := pc.TopicSeek; sk != nil {
			cp := "none"
			if sk.Checkpoint != nil {
				cp = *sk.Checkpoint
			}
			parts = append(parts, fmt.Sprintf("checkpoint %s of %s..%s", cp, sk.Earliest, sk.Head))
		}
	case repair.ActionCordon, repair.ActionDrain, repair.ActionUncordon:
		if pl := pc.Placement; pl != nil {
			parts = append(parts, "mode "+pl.Mode)
		}
	case repair.ActionPin, repair.ActionUnpin:
		if pl := pc.Placement; pl != nil {
			if pl.Record == nil {
				parts = append(parts, "not pinned")
			} else {
				parts = append(parts, "pinned to "+pl.Node)
			}
		}
	case repair.ActionPruneConsumer:
		if pc.ConsumerPending != nil {
			parts = append(parts, fmt.Sprintf("%d pending", *pc.ConsumerPending))
		}
	case repair.ActionSeek:
		if st := pc.Seek; st != nil {
			for _, ln := range st.Lanes {
				if ln.From != nil {
					parts = append(parts, fmt.Sprintf("%s %s -> %s", ln.Lane, *ln.From, ln.To))
				}
			}
			switch st.Owner {
			case repair.SeekOwnerProtctl:
				parts = append(parts, "protctl node "+derefStr(pc.Lease))
			case repair.SeekOwnerForeign:
				parts = append(parts, "foreign lease "+derefStr(pc.Lease))
			}
		}
	case repair.ActionReap:
		if pc.LastEntryID != nil {
			parts = append(parts, "last entry "+*pc.LastEntryID)
		}
		for _, gl := range pc.Leases {
			if gl.Lease != nil {
				parts = append(parts, "lease "+*gl.Lease)
			}
		}
	}
	switch it.Action {
	case repair.ActionRelease, repair.ActionDeadLetter, repair.ActionPruneConsumer, repair.ActionTopicSeek, repair.ActionSeek:
		if it.Action == repair.ActionSeek && pc.Lease != nil {
			break // said with the owner's kind above
		}
		if pc.Lease != nil {
			parts = append(parts, "lease "+*pc.Lease)
		} else {
			// The words of partitions ls and show (a plan from before
			// leaseState was recorded says "not held").
			parts = append(parts, "lease "+inspect.NotHeldText(pc.LeaseState, pc.Generation))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

// Target names an item's target (the TARGET column): Target.String, but
// "G on C/K" for a seek, whose target has the fields of a release's.
func Target(it repair.Item) string {
	if it.Action == repair.ActionSeek {
		return it.Target.Group + " on " + it.Target.Category + "/" + it.Target.Key
	}
	return it.Target.String()
}

func derefStr(p *string) string {
	if p == nil {
		return "-"
	}
	return *p
}

// Reason is why an item is allowed or not, or once applied what Apply
// did (the REASON column).
func Reason(it repair.Item) string {
	if it.Detail != "" {
		return it.Detail
	}
	return it.Reason
}

// Pending counts the items Apply would try: allowed and not already
// settled by the plan (a lease already free is skipped). It is the
// number of changes the confirmation question asks about.
func Pending(p *repair.Plan) int {
	n := 0
	for _, it := range p.Items {
		if it.Allowed && it.Result == repair.ResultNone {
			n++
		}
	}
	return n
}

// PlanColumns are the columns of a plan's items, over repair.Item:
// ACTION, TARGET, SEEN, ALLOWED, with results (after an apply) RESULT,
// and REASON.
func PlanColumns(results bool) []output.Column {
	cols := []output.Column{
		output.Col("ACTION", func(it repair.Item) string { return string(it.Action) }),
		output.Col("TARGET", Target),
		output.Col("SEEN", Seen),
		output.Col("ALLOWED", func(it repair.Item) string { return YesNo(it.Allowed) },
			output.Toned(func(it repair.Item) output.Tone {
				if it.Allowed {
					return output.ToneGood
				}
				return output.ToneBad
			})),
	}
	if results {
		cols = append(cols, output.Col("RESULT", func(it repair.Item) string { return Dash(string(it.Result)) },
			output.Toned(func(it repair.Item) output.Tone { return ResultTone(it.Result) })))
	}
	return append(cols, output.Col("REASON", Reason))
}

// ResultTone colours an item's result: applied and done (by an earlier
// run of the plan) good, conflict and refused bad, skipped muted.
func ResultTone(r repair.Result) output.Tone {
	switch r {
	case repair.ResultApplied, repair.ResultDone:
		return output.ToneGood
	case repair.ResultConflict, repair.ResultRefused:
		return output.ToneBad
	case repair.ResultSkipped:
		return output.ToneMuted
	}
	return output.ToneNone
}
