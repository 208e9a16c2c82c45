package repair

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/inspect"
)

// APIVersion and Kind identify a serialized plan.
const (
	APIVersion = "protctl.dev/v1"
	PlanKind   = "Plan"
)

// Action names a repair. Names are API (they appear in plan files).
type Action string

// Actions.
const (
	// ActionReap retires a cold partition (broker ReapPartition).
	ActionReap Action = "reap"
	// ActionRelease deletes a lease, fenced on the token seen in the plan.
	ActionRelease Action = "release"
	// ActionTrim caps a stream without removing what a group needs.
	ActionTrim Action = "trim"
	// ActionDeadLetter moves a group's pending head to C:K:dlq and acks
	// it, fenced on the lease seen in the plan.
	ActionDeadLetter Action = "dead-letter"
	// ActionRetry asks the owner of a parked aggregate to handle it again.
	ActionRetry Action = "retry"
	// ActionSkip asks the owner of a parked aggregate to skip its head.
	ActionSkip Action = "skip"
	// ActionPruneConsumer deletes a consumer of a group that holds no
	// pending entries and is not the live lease's (a stale consumer).
	ActionPruneConsumer Action = "prune-consumer"
	// ActionDLQReplay appends a dead letter back to its partition and
	// deletes it, in one step, fenced on the entry the plan saw.
	ActionDLQReplay Action = "dlq-replay"
	// ActionDLQPurge deletes a dead letter, fenced on the entry the plan
	// saw.
	ActionDLQPurge Action = "dlq-purge"
	// ActionSeek moves a group's position on a partition's lanes and
	// settles its pending entries: in one step while the lease stays
	// free, or carried out by the protctl node that owns it.
	ActionSeek Action = "seek"
	// ActionCordon, ActionDrain and ActionUncordon set or clear a node's
	// operator mode, fenced on the mode record the plan saw
	// (placement.go).
	ActionCordon   Action = "cordon"
	ActionDrain    Action = "drain"
	ActionUncordon Action = "uncordon"
	// ActionPin and ActionUnpin set or remove a partition's pin, fenced
	// on the pin the plan saw (placement.go).
	ActionPin   Action = "pin"
	ActionUnpin Action = "unpin"
)

var actions = map[Action]bool{
	ActionReap: true, ActionRelease: true, ActionTrim: true,
	ActionDeadLetter: true, ActionRetry: true, ActionSkip: true,
	ActionPruneConsumer: true, ActionDLQReplay: true, ActionDLQPurge: true,
	ActionSeek: true, ActionTopicSeek: true,
	ActionCordon: true, ActionDrain: true, ActionUncordon: true, ActionPin: true, ActionUnpin: true,
}

// Result is what Apply did with an item. The zero value (not applied
// yet, or a dry run) is encoded as JSON null.
type Result string

// Results.
const (
	ResultNone Result = ""
	// ResultApplied: the change was made.
	ResultApplied Result = "applied"
	// ResultConflict: the state the plan saw has moved; nothing changed.
	ResultConflict Result = "conflict"
	// ResultRefused: a guard said no (the plan already did, or the store
	// refused for a reason the plan predicted); nothing changed.
	ResultRefused Result = "refused"
	// ResultSkipped: nothing to do (e.g. the lease is already free).
	ResultSkipped Result = "skipped"
	// ResultDone: an earlier apply of the same plan (an interrupted run
	// this one resumes) made the change; nothing was changed now.
	ResultDone Result = "done"
)

// MarshalJSON encodes ResultNone as null.
func (r Result) MarshalJSON() ([]byte, error) {
	if r == ResultNone {
		return []byte("null"), nil
	}
	return json.Marshal(string(r))
}

// UnmarshalJSON accepts null and the five results.
func (r *Result) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*r = ResultNone
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	switch Result(s) {
	case ResultApplied, ResultConflict, ResultRefused, ResultSkipped, ResultDone:
		*r = Result(s)
		return nil
	}
	return fmt.Errorf("unknown result %q", s)
}

// Target is what an item acts on. Which fields are set depends on the
// action:
//
//	reap         category, key
//	release      group, key (category when known)
//	trim         stream
//	dead-letter  category, key, group, stream (the lane), id
//	retry, skip  subscription, aggregate
//	prune-consumer  category, key, group, stream (the lane), consumer
//	dlq-replay, dlq-purge  category, stream (the dead-letter stream), id,
//	                key (the partition whose C:K:dlq it is; none for C:dlq)
//	seek         category, key, group
//	topic-seek   service, topic, subscription, partition
//	cordon, drain, uncordon  service, node
//	pin, unpin   service, scope, partition (and node: the pin's); category
//	             and key for a Redis partition, for the record
type Target struct {
	Category     string `json:"category,omitempty"`
	Key          string `json:"key,omitempty"`
	Group        string `json:"group,omitempty"`
	Stream       string `json:"stream,omitempty"`
	ID           string `json:"id,omitempty"`
	Subscription string `json:"subscription,omitempty"`
	Aggregate    string `json:"aggregate,omitempty"`
	Consumer     string `json:"consumer,omitempty"`
	// Partition is a Kafka entry's partition: an aggregate can be parked
	// on several. Empty for Redis entries (Key names the partition).
	Partition string `json:"partition,omitempty"`
	// Service names a topic-seek's lease group (with Topic), a node
	// mode's (with Node) or a pin's (with Scope; placement.Pin).
	Service string `json:"service,omitempty"`
	Topic   string `json:"topic,omitempty"`
	Node    string `json:"node,omitempty"`
	Scope   string `json:"scope,omitempty"`
	// Selector is a pause or resume's selection (pause.Selector:
	// "key:<K>", "glob:<P>", "all") of Subscription.
	Selector string `json:"selector,omitempty"`
}

// String names the target for tables: "shop::order/o-1", "group g on
// o-1", a stream, "entry 1-2 of shop::order:o-1 for g", "sub/agg".
func (t Target) String() string {
	switch {
	case t.Scope != "":
		return "pin of " + t.Scope + "/" + t.Partition
	case t.Node != "":
		return "node " + t.Node + " of " + t.Service
	case t.Selector != "" && t.Topic != "":
		return t.Subscription + " " + t.Selector + " on " + t.Topic
	case t.Topic != "":
		return t.Subscription + " on " + t.Topic + "/" + t.Partition
	case t.Selector != "":
		return t.Subscription + " " + t.Selector
	case t.Subscription != "":
		return t.Subscription + "/" + t.Aggregate
	case t.Consumer != "":
		return "consumer " + t.Consumer + " of " + t.Group + " on " + t.Stream
	case t.ID != "" && t.Group == "":
		return "entry " + t.ID + " of " + t.Stream
	case t.ID != "":
		return "entry " + t.ID + " of " + t.Stream + " for " + t.Group
	case t.Group != "":
		return "lease of " + t.Group + " on " + t.Key
	case t.Category != "":
		return t.Category + "/" + t.Key
	}
	return t.Stream
}

// LaneState is a lane's state as a plan saw it.
type LaneState struct {
	Stream      string                  `json:"stream"`
	Exists      bool                    `json:"exists"`
	Length      int64                   `json:"length"`
	LastEntryID *string                 `json:"lastEntryId"`
	Groups      []inspect.GroupPosition `json:"groups"`
}

// Precondition is the state an item saw when it was planned; Apply
// re-checks the parts its action depends on (see each action's doc in
// doc.go). Unknown or not-applicable values are null.
type Precondition struct {
	// Lease is the lease value (owner:generation) seen; null when free.
	Lease *string `json:"lease"`
	// Generation is the fence counter seen; null when never leased.
	Generation *int64 `json:"generation"`
	// LeaseState is the group's lease state on the partition seen, in the
	// words of partitions ls and show (inspect.LeaseStateOf: held,
	// released, expired, free); absent for actions without a lease, and
	// in plans from before it was recorded.
	LeaseState inspect.LeaseState `json:"leaseState,omitempty"`
	// LastEntryID is the newest entry of the target stream (main lane).
	LastEntryID *string `json:"lastEntryId"`
	// Lanes are the partition's lanes with the groups' positions.
	Lanes []LaneState `json:"lanes,omitempty"`
	// Leases are the reap target's leases, one per group: the value seen,
	// null when free. The apply reaps only while each still holds it.
	Leases []GroupLease `json:"leases,omitempty"`
	// Pending is the dead-letter target's pending record.
	Pending *inspect.PendingEntry `json:"pending,omitempty"`
	// Trim is what a trim would remove now.
	Trim *inspect.TrimInfo `json:"trim,omitempty"`
	// Parked is the ledger entry's state (retry, skip).
	Parked *ParkedState `json:"parked,omitempty"`
	// ConsumerPending is the prune-consumer target's pending count seen
	// (0: only empty consumers are planned).
	ConsumerPending *int64 `json:"consumerPending,omitempty"`
	// DeadLetter is the dlq-replay or dlq-purge target as seen.
	DeadLetter *DeadLetterState `json:"deadLetter,omitempty"`
	// Seek is the seek target's owner and lanes (and, once applied, when
	// and under which generation it was done).
	Seek *SeekState `json:"seek,omitempty"`
	// TopicSeek is the topic-seek target's partition as seen.
	TopicSeek *TopicSeekState `json:"topicSeek,omitempty"`
	// Placement is the node mode or pin record the plan saw (cordon,
	// drain, uncordon, pin, unpin); Apply changes it only while it still
	// holds exactly that.
	Placement *PlacementState `json:"placement,omitempty"`
	// Pause is the pause or resume target's entry as stored (JSON), ""
	// for none: the apply changes it only while it still is.
	Pause *string `json:"pause,omitempty"`
}

// TopicSeekState is a topic partition and a subscription's checkpoint on it
// as a seek plan saw them. Offsets are decimal strings.
type TopicSeekState struct {
	// Checkpoint is the subscription's checkpoint; null when none was
	// saved. A free partition is set only while it is still this.
	Checkpoint *string `json:"checkpoint"`
	Earliest   string  `json:"earliest"`
	Head       string  `json:"head"`
	// HandledAgain and Skipped count the records between the checkpoint
	// and the new one, as of the plan (a running owner moves on).
	HandledAgain int64 `json:"handledAgain"`
	Skipped      int64 `json:"skipped"`
}

// PlacementState is a node mode or pin as a plan saw it.
type PlacementState struct {
	// Record is the stored record (JSON, as stored); null when none.
	Record *string `json:"record"`
	// Mode is the node's stored mode ("active" when none); for pins, the
	// node the stored pin names ("" when none).
	Mode string `json:"mode,omitempty"`
	Node string `json:"node,omitempty"`
}

// DeadLetterState is a dead letter as a plan saw it. Apply acts on it only
// while its fields still have Digest.
type DeadLetterState struct {
	// Digest is redisbroker.EntryDigest of the entry's fields.
	Digest string `json:"digest"`
	// OriginalStream and OriginalID are where it was dead-lettered from,
	// as it records them ("" when it does not).
	OriginalStream string `json:"originalStream,omitempty"`
	OriginalID     string `json:"originalId,omitempty"`
}

// GroupLease is one group's lease as a plan saw it.
type GroupLease struct {
	Group string `json:"group"`
	// Lease is the lease value (owner:generation); null when free.
	Lease *string `json:"lease"`
}

// ParkedState is the ledger entry a retry or skip was planned on. Apply
// records the request only while the entry still has the same status,
// position, attempts, generation and pending request (ledger.Pin);
// ParkedAt and Error are what the operator saw, for the record.
type ParkedState struct {
	Status     string `json:"status"`
	Position   string `json:"position"`
	Attempts   int    `json:"attempts"`
	Generation int64  `json:"generation"`
	// Request is the action of the request the entry held ("retry",
	// "skip"); null for none.
	Request *string `json:"request"`
	// ParkedAt is in the CLI's timestamp format (output.Timestamp); null
	// when unknown.
	ParkedAt *string `json:"parkedAt"`
	Error    string  `json:"error,omitempty"`
}

// Params are the action's arguments, beyond its target.
type Params struct {
	// MinIdleMs is the reap's minimum age of the newest entry.
	MinIdleMs int64 `json:"minIdleMs,omitempty"`
	// BackfillSuffix is the reap's backfill lane; "" is the default.
	BackfillSuffix string `json:"backfillSuffix,omitempty"`
	// MaxLen is the trim's cap.
	MaxLen int64 `json:"maxLen,omitempty"`
	// Force overrode a guard when planning (release, reap or dead-letter
	// of a live owner's partition).
	Force bool `json:"force,omitempty"`
	// MinDeliveries is the dead-letter's guard: an entry delivered fewer
	// times is refused unless Force (0, in a plan from before it was
	// recorded: the default, 2). Apply checks it again.
	MinDeliveries int64 `json:"minDeliveries,omitempty"`
	// Reason is recorded with a dead-letter or skip.
	Reason string `json:"reason,omitempty"`
	// DLQStream is where dead-letter copies the head (C:K:dlq).
	DLQStream string `json:"dlqStream,omitempty"`
	// By names the operator, for the ledger.
	By string `json:"by,omitempty"`
	// ReplayTo is where a dlq-replay appends: the partition's main lane
	// (or, for a Protean category dead letter of an unpartitioned
	// subscription, the category's stream).
	ReplayTo string `json:"replayTo,omitempty"`
	// ReplayKey is the partition ReplayTo belongs to, recorded in the
	// category's index as a publish does; "" for a category's stream.
	ReplayKey string `json:"replayKey,omitempty"`
	// SeekTo is a seek's target as asked (--to, or "shift N"); for a
	// topic-seek, the new checkpoint (decimal), with SeekSpec what the
	// operator asked for (--to, --shift or --from-file).
	SeekTo   string `json:"seekTo,omitempty"`
	SeekSpec string `json:"seekSpec,omitempty"`
	// Lane is a seek's lane selection: main, backfill or all.
	Lane string `json:"lane,omitempty"`
}

// Item is one planned change. Allowed and Reason are the plan's verdict;
// Result and Detail are filled by Apply.
type Item struct {
	Action       Action       `json:"action"`
	Target       Target       `json:"target"`
	Precondition Precondition `json:"precondition"`
	Params       Params       `json:"params"`
	Allowed      bool         `json:"allowed"`
	// Reason says why the item is allowed or not, naming the group and
	// the lane when a group blocks it.
	Reason string `json:"reason"`
	Result Result `json:"result"`
	// Detail says what Apply did or why it did not, e.g. "removed 12
	// entries" or "lease is now worker-2:8, planned worker-1:7".
	Detail string `json:"detail,omitempty"`
}

// Plan is a dry run: items with the state each saw. Encode it with
// encoding/json (it is the `--dry-run -o json` document) and load it
// back with ParsePlan.
type Plan struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Layout is the key layout the plan was made for ("protean" or
	// "cluster"); Apply refuses a plan of another layout.
	Layout    string    `json:"layout"`
	CreatedAt time.Time `json:"createdAt"`
	// ID names the plan (parked retry and skip plans): the ledger
	// remembers which entries an apply of this plan requested, so that a
	// resumed apply recognises them (ResultDone) and requests only the
	// rest. "" for plans that need no resume.
	ID string `json:"id,omitempty"`
	// Selection says how a bulk plan chose its items; nil otherwise.
	Selection *Selection `json:"selection,omitempty"`
	Items     []Item     `json:"items"`
}

// Selection is how a filtered bulk plan chose its items: the plan pins
// exactly these, whatever is parked later.
type Selection struct {
	// Count is the number of items: the entries the plan will act on.
	Count int `json:"count"`
	// Matched is how many entries the filter matched; more than Count
	// when Max cut the set.
	Matched int `json:"matched"`
	// Max is the cap asked for (--max); 0 for none.
	Max int `json:"max,omitempty"`
	// Filter is the filter as the CLI's flags; null for every entry.
	Filter *string `json:"filter"`
	// At is the server's time the ages were measured at, in the CLI's
	// timestamp format (output.Timestamp).
	At string `json:"at"`
}

// Predicted is the outcome Apply would have if nothing moved: what a dry
// run exits with.
func (p *Plan) Predicted() Outcome {
	var allowed, refused, skipped int
	for _, it := range p.Items {
		switch {
		case it.Result == ResultSkipped:
			skipped++
		case it.Allowed:
			allowed++
		default:
			refused++
		}
	}
	return outcome(allowed, 0, refused, 0)
}

// Outcome sums up an Apply (or a Plan's prediction).
type Outcome string

// Outcomes.
const (
	// OutcomeApplied: every item was applied, done by an earlier run of
	// the plan, or had nothing to do.
	OutcomeApplied Outcome = "applied"
	// OutcomeConflict: no item applied, at least one conflicted.
	OutcomeConflict Outcome = "conflict"
	// OutcomeRefused: no item applied, none conflicted, at least one
	// was refused.
	OutcomeRefused Outcome = "refused"
	// OutcomePartial: some items applied, some conflicted, were refused,
	// or were left for a later run (ApplyOptions.Max).
	OutcomePartial Outcome = "partial"
)

// outcome sums up counts of results; applied includes the items done by
// an earlier run of the plan, left the items a bounded run did not try.
func outcome(applied, conflict, refused, left int) Outcome {
	switch {
	case conflict == 0 && refused == 0 && left == 0:
		return OutcomeApplied
	case applied > 0:
		return OutcomePartial
	case conflict > 0:
		return OutcomeConflict
	}
	return OutcomeRefused
}

// ExitCode maps o to the CLI contract: 0 applied, 5 conflict, 6
// refused, 7 partial.
func (o Outcome) ExitCode() int {
	switch o {
	case OutcomeConflict:
		return clierr.ExitConflict
	case OutcomeRefused:
		return clierr.ExitRefused
	case OutcomePartial:
		return clierr.ExitPartial
	}
	return clierr.ExitOK
}

// Err is nil for OutcomeApplied and otherwise a *clierr.Error of the
// matching kind with a one-line summary of p's results, so a command can
// return it after printing the items.
func (o Outcome) Err(p *Plan) error {
	var kind clierr.Kind
	switch o {
	case OutcomeApplied:
		return nil
	case OutcomeConflict:
		kind = clierr.Conflict
	case OutcomeRefused:
		kind = clierr.Refused
	default:
		kind = clierr.Partial
	}
	return kind.Errorf("%s", p.Summary())
}

// Summary counts the items by result: "2 applied, 1 conflict".
func (p *Plan) Summary() string {
	counts := map[Result]int{}
	for _, it := range p.Items {
		counts[it.Result]++
	}
	var parts []string
	for _, r := range []Result{ResultApplied, ResultDone, ResultConflict, ResultRefused, ResultSkipped, ResultNone} {
		if n := counts[r]; n > 0 {
			name := string(r)
			if r == ResultNone {
				name = "not applied"
			}
			parts = append(parts, fmt.Sprintf("%d %s", n, name))
		}
	}
	if len(parts) == 0 {
		return "no items"
	}
	return strings.Join(parts, ", ")
}

// ErrInvalidPlan is returned (wrapped, with the reason) by ParsePlan and
// Apply for a plan document that is not a valid plan.
var ErrInvalidPlan = errors.New("repair: invalid plan")

// ParsePlan decodes and validates a plan document strictly: unknown
// fields, unknown actions, a wrong apiVersion or kind, an item without the
// target fields its action needs, or trailing data are rejected with an
// error wrapping ErrInvalidPlan that names the item.
func ParsePlan(data []byte) (*Plan, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Plan
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPlan, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: trailing data after the plan", ErrInvalidPlan)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// ReadPlan is ParsePlan of everything r yields.
func ReadPlan(r io.Reader) (*Plan, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("repair: read plan: %w", err)
	}
	return ParsePlan(b)
}

// Validate checks p's header and every item's action and target.
func (p *Plan) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidPlan, fmt.Sprintf(format, a...))
	}
	if p.APIVersion != APIVersion {
		return bad("apiVersion is %q, want %q", p.APIVersion, APIVersion)
	}
	if p.Kind != PlanKind {
		return bad("kind is %q, want %q", p.Kind, PlanKind)
	}
	if p.Layout != "protean" && p.Layout != "cluster" {
		return bad("layout is %q, want \"protean\" or \"cluster\"", p.Layout)
	}
	if p.ID != "" && !validPlanID(p.ID) {
		return bad("id %q is not a plan id (1 to 64 of A-Z a-z 0-9 . _ -)", p.ID)
	}
	if p.Selection != nil && p.Selection.Count != len(p.Items) {
		return bad("selection.count is %d but the plan has %d items", p.Selection.Count, len(p.Items))
	}
	for i, it := range p.Items {
		if !actions[it.Action] {
			return bad("item %d: unknown action %q", i, it.Action)
		}
		t := it.Target
		need := func(name, v string) error {
			if v == "" {
				return bad("item %d (%s): target.%s is required", i, it.Action, name)
			}
			return nil
		}
		var errs []error
		switch it.Action {
		case ActionReap:
			errs = append(errs, need("category", t.Category), need("key", t.Key))
			if it.Params.MinIdleMs < 0 {
				errs = append(errs, bad("item %d (reap): params.minIdleMs must not be negative", i))
			}
		case ActionRelease:
			errs = append(errs, need("group", t.Group), need("key", t.Key))
			if it.Allowed && it.Precondition.Lease == nil {
				errs = append(errs, bad("item %d (release): precondition.lease is required", i))
			}
		case ActionTrim:
			errs = append(errs, need("stream", t.Stream))
			if it.Params.MaxLen <= 0 {
				errs = append(errs, bad("item %d (trim): params.maxLen must be positive", i))
			}
			if it.Allowed && it.Precondition.Trim == nil {
				errs = append(errs, bad("item %d (trim): precondition.trim is required", i))
			}
		case ActionDeadLetter:
			errs = append(errs, need("category", t.Category), need("key", t.Key), need("group", t.Group))
			if it.Allowed {
				errs = append(errs, need("stream", t.Stream), need("id", t.ID))
				if it.Params.DLQStream == "" {
					errs = append(errs, bad("item %d (dead-letter): params.dlqStream is required", i))
				}
				if it.Precondition.Pending == nil {
					errs = append(errs, bad("item %d (dead-letter): precondition.pending is required", i))
				}
			}
		case ActionPause, ActionResume:
			errs = append(errs, need("subscription", t.Subscription), need("selector", t.Selector))
			if it.Allowed && it.Precondition.Pause == nil {
				errs = append(errs, bad("item %d (%s): precondition.pause is required", i, it.Action))
			}
		case ActionPruneConsumer:
			errs = append(errs, need("category", t.Category), need("key", t.Key), need("group", t.Group),
				need("stream", t.Stream), need("consumer", t.Consumer))
		case ActionDLQReplay, ActionDLQPurge:
			errs = append(errs, need("category", t.Category), need("stream", t.Stream), need("id", t.ID))
			if it.Allowed && it.Precondition.DeadLetter == nil {
				errs = append(errs, bad("item %d (%s): precondition.deadLetter is required", i, it.Action))
			}
			if it.Allowed && it.Action == ActionDLQReplay && it.Params.ReplayTo == "" {
				errs = append(errs, bad("item %d (dlq-replay): params.replayTo is required", i))
			}
		case ActionTopicSeek:
			errs = append(errs, need("service", t.Service), need("topic", t.Topic), need("subscription", t.Subscription),
				need("partition", t.Partition))
			if it.Allowed && it.Params.SeekTo == "" {
				errs = append(errs, bad("item %d (topic-seek): params.seekTo is required", i))
			}
			if it.Allowed && it.Precondition.TopicSeek == nil {
				errs = append(errs, bad("item %d (topic-seek): precondition.topicSeek is required", i))
			}
		case ActionSeek:
			errs = append(errs, need("category", t.Category), need("key", t.Key), need("group", t.Group))
			if it.Allowed && it.Precondition.Seek == nil {
				errs = append(errs, bad("item %d (seek): precondition.seek is required", i))
			}
			if it.Allowed && it.Precondition.Seek != nil && it.Precondition.Seek.Owner != SeekOwnerNone && it.Precondition.Lease == nil {
				errs = append(errs, bad("item %d (seek): precondition.lease is required for an owned partition", i))
			}
		case ActionCordon, ActionDrain, ActionUncordon:
			errs = append(errs, need("service", t.Service), need("node", t.Node))
			if it.Allowed && it.Precondition.Placement == nil {
				errs = append(errs, bad("item %d (%s): precondition.placement is required", i, it.Action))
			}
		case ActionPin, ActionUnpin:
			errs = append(errs, need("service", t.Service), need("scope", t.Scope), need("partition", t.Partition))
			if it.Action == ActionPin {
				errs = append(errs, need("node", t.Node))
			}
			if it.Allowed && it.Precondition.Placement == nil {
				errs = append(errs, bad("item %d (%s): precondition.placement is required", i, it.Action))
			}
		case ActionRetry, ActionSkip:
			errs = append(errs, need("subscription", t.Subscription), need("aggregate", t.Aggregate))
			if it.Allowed && it.Precondition.Parked == nil {
				errs = append(errs, bad("item %d (%s): precondition.parked is required", i, it.Action))
			}
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	return nil
}
