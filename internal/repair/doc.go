// Package repair changes partition state safely: every action is first a
// Plan (a dry run whose items record the state each saw) and then an
// Apply that re-checks each item's precondition in Redis and changes
// only what still matches. Plans serialize to JSON (`--dry-run -o json`)
// and load back with ParsePlan (`protctl apply -f plan.json`).
//
// # Results and outcome
//
// Each item ends with one Result:
//
//	applied   the change was made
//	conflict  the state the plan saw has moved; nothing was changed
//	refused   a guard said no (the plan already said so, or a guard in
//	          the store refused for the reason the plan predicted)
//	skipped   nothing to do (a lease not held, a trim removing 0)
//	done      an earlier apply of the same plan made the change (a
//	          resumed run; parked retry and skip, seek, dlq replay):
//	          nothing changed now
//
// Apply's Outcome maps to the CLI's exit codes (Outcome.ExitCode): 0 when
// every item applied, was done, or was skipped, 5 when nothing applied
// and something conflicted, 6 when nothing applied and something was
// refused, 7 when some applied (or were done) and some did not, or a run
// bounded by ApplyOptions.Max left items for a later one.
//
// # Guards are derived again
//
// An item's Allowed is the plan's verdict, and a plan file can be edited:
// Apply refuses an item the plan refused without trying it, and derives
// the guards of every other item again, from its Params (Force,
// MinDeliveries, ...), the state it records and the state now, before
// trying it (guards.go lists them by action).
//
// # What each action re-checks
//
// reap: the plan evaluates the broker's reap rules (every group on every
// lane delivered to the end with nothing pending, registered groups
// created, a non-empty lane has a group, the newest entry older than
// minIdle) and refuses, naming the lane, group and reason, when one
// fails. Apply first compares each lane's newest entry id with the plan's
// (moved: conflict), then calls the broker's ReapPartition, which checks
// everything again and deletes in one script. A refusal by ReapPartition
// of an item the plan allowed is a conflict (the state moved between the
// two steps); nothing is ever deleted that the atomic check rejects. The
// plan also records every group's lease; a held one (a live owner) refuses
// the item unless planned with Force, as release does. Apply reaps through
// the broker's LeaseReaper, in the same script as the lane checks, only
// while each lease still holds the value seen (none for a free one), and
// deletes those lease keys with the lanes.
//
// release: the plan and the apply first check that the category, the
// partition and the group are known (a lease key names no category, so a
// typo would otherwise release another category's lease); then it is
// fenced on the lease value seen in the plan
// (ReleasePartitionLease with that token). A free lease is skipped; a
// held lease is refused unless planned with Force, because releasing
// takes the partition from its owner. If the lease changed since the
// plan, the fenced release returns false: conflict.
//
// trim: the plan shows the floor (the oldest entry some group still
// needs), the group that pins it, and how many entries would go. Apply
// checks that the stream still exists with the same groups (a group
// created or deleted since the plan changes the floor's meaning:
// conflict), then calls the broker's Trim, which recomputes the floor and
// trims in one script, so it never removes an entry a group has not
// read and acked, whatever moved. Groups advancing between plan and apply
// are expected on a hot stream and are not a conflict. A trim that
// removes nothing now (applied again, or no group advanced) is skipped.
//
// dead-letter: moves one pending entry (by default the group's oldest,
// the head a halted partition is stuck on) to C:K:dlq and acks it with
// the broker's DeadLetterPartitionFenced, in one atomic step fenced on a
// lease:
//
//   - When the plan saw a lease held (a Protean instance stuck on a
//     poison message), the fence is that lease's key and token. If the
//     lease moved (expired, released, re-acquired), the call fails with
//     broker.ErrLeaseLost: conflict, nothing changed.
//   - When the plan saw no lease, Apply takes a short operator lease
//     (AcquirePartitionLease with owner WithOperator, TTL
//     WithOperatorLeaseTTL) so that no owner can start on the partition
//     while the head moves, fences the dead-letter on it, and releases it.
//     The lease is taken only while it is still free and the generation
//     counter is still the plan's, checked and taken in one step
//     (redisbroker's AcquirePartitionLeaseAt): a lease held by then, or a
//     counter that moved (someone leased the partition in between), is a
//     conflict that changes nothing, the counter included. The operator
//     lease bumps the generation like any acquire: generations only grow,
//     and any owner from before is fenced out.
//
// Right before the fenced call Apply also checks that the entry is still
// pending for the group (XPENDING) with at least the delivery count the
// plan saw; an entry acked since the plan is a conflict. That check and
// the fenced call are two steps; the only client that could ack the entry
// in between is the lease holder the fence names, and the outcome of that
// race is a dead-letter copy of an entry that was also handled, never a
// lost one.
//
// The plan refuses an entry delivered fewer than MinDeliveries times
// (default 2) unless Force is set: an owner may be handling it right now.
//
// prune-consumer: the plan lists fsck's stale consumers (no pending
// entries, not the group's live lease). Apply deletes each with the
// broker's DeleteEmptyConsumer, one script that checks again, right
// before XGROUP DELCONSUMER (which would destroy pending entries), that
// the consumer holds none and is not the lease's token: one that gained
// pending entries or became the live lease's consumer since the plan is a
// conflict and is kept; one already gone is skipped.
//
// dlq-replay: appends a dead letter back to its partition's main lane
// (C:K for C:K:dlq; for a Protean category dead letter in C:dlq, the
// partition or the category stream it records as its origin) and deletes
// it, in one script of the broker's (ReplayDeadLetter), only while the
// dead letter still holds the fields the plan saw (their digest): a dead
// letter is replayed at most once because the step that replays it
// deletes it. The script also remembers (C:K:dlq:__replayed__, for
// redisbroker.ReplayedMemory) what each replayed dead letter became, so
// that a plan applied again, or resumed after a failure, reports the items
// it replayed before as done ("already replayed, as X"), not as
// conflicts. A dead letter gone otherwise (purged) is a conflict. The
// replayed entry is the original (without _dlq_metadata) with
// _replayed_from naming the dead-letter stream and id; it lands after
// everything already in the stream, so the key sees it after the newer
// entries, and the replayed ones in the plan's order. Like a publish, the
// replay records the key in the category's index and wakes its watchers
// (in the cluster layout in a second step, the index being in another
// slot). A dead letter whose body was gone when it was dead-lettered, or
// whose origin is not the category's, is refused.
//
// dlq-purge: deletes a dead letter with the broker's DeleteDeadLetter,
// only while it still holds the fields the plan saw; one gone or changed
// is a conflict. Dead letters added since the plan are not in it and stay.
//
// retry, skip: recorded in the failure ledger, which the owner of the
// partition acts on under its own fence, now or when a node next owns it.
// The plan has an ID and pins each entry as seen (status, position,
// attempts, generation, pending request: ledger.Pin). Apply records
// each request with ledger.PinnedRequester in one atomic step that
// checks the pin and remembers the plan ID as the request's token for the
// entry:
//
//   - the entry moved from the pin (parked again after a failed retry, at
//     another position, by another owner, or requested by someone else):
//     conflict, nothing changed;
//   - gone (resolved): conflict;
//   - requested by an earlier apply of this plan (the token is known for
//     the entry, even after the owner resolved or re-parked it): done,
//     nothing changed. This is how an interrupted apply (killed, Redis
//     gone) is resumed from the plan file: `apply -f` requests only what
//     is left, and never an entry twice
//     (docs/decisions/0038-bulk-parked-operations.md);
//   - a retry of an entry that became unrecoverable: refused.
//
// A filtered bulk plan (ParkedRequest.All) pins exactly the entries its
// filter matched when it was made (Plan.Selection counts them): entries
// parked later are not in it, whatever they match.
package repair
