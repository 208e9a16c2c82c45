package inspect

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/pause"
)

// Category is one category found by Categories: a key C:__partitions__.
type Category struct {
	Name string `json:"name"`
	// Partitions is the size of the index (SCARD).
	Partitions int64 `json:"partitions"`
	// Groups are the category's registered groups (C:__groups__), sorted;
	// empty for Protean deployments, which do not register groups.
	Groups []string `json:"groups"`
}

// Lane is one stream of a partition: the main lane and, when it exists,
// the backfill lane. Dead-letter streams are not lanes.
type Lane struct {
	// Name is "main" or the lane's suffix (e.g. "backfill").
	Name   string `json:"name"`
	Stream string `json:"stream"`
	// Exists is false for a main lane whose key is missing (an index
	// entry without a stream). A missing backfill lane is not listed. A
	// key of another Redis type exists (Error says what it holds).
	Exists bool `json:"exists"`
	// Length is the number of entries; unknown when Error is set
	// (LengthKnown): 0 here, null in JSON.
	Length      int64   `json:"length"`
	LastEntryID *string `json:"lastEntryId"` // null when the lane is empty or unread
	// Groups are the groups created on this lane with their positions;
	// filled only with PartitionOptions.LaneGroups (and by Partition).
	Groups []LaneGroup `json:"groups,omitempty"`
	// Error is set when the lane's key could not be read as a stream (it
	// holds another Redis type: the message names the key, its type and
	// "stream"); its length, entries and groups are then unknown.
	Error string `json:"error,omitempty"`
}

// LengthKnown reports whether Length is the lane's length: false when
// the lane could not be read (Error).
func (l *Lane) LengthKnown() bool { return l.Error == "" }

// laneJSON is Lane as JSON: Lane's fields with their tags, in their
// order, the length null when unknown. (A field added to Lane is added
// here too: TestLaneAndPartitionJSONKeepEveryField fails until it is.)
type laneJSON struct {
	Name        string      `json:"name"`
	Stream      string      `json:"stream"`
	Exists      bool        `json:"exists"`
	Length      *int64      `json:"length"`
	LastEntryID *string     `json:"lastEntryId"`
	Groups      []LaneGroup `json:"groups,omitempty"`
	Error       string      `json:"error,omitempty"`
}

// MarshalJSON writes l with its length null when unknown (LengthKnown),
// as every unknown value is.
func (l Lane) MarshalJSON() ([]byte, error) {
	j := laneJSON{Name: l.Name, Stream: l.Stream, Exists: l.Exists, LastEntryID: l.LastEntryID, Groups: l.Groups, Error: l.Error}
	if l.LengthKnown() {
		j.Length = &l.Length
	}
	return marshalJSON(j)
}

// LaneGroup is a group's position on one lane.
type LaneGroup struct {
	Name            string `json:"name"`
	LastDeliveredID string `json:"lastDeliveredId"`
	Pending         int64  `json:"pending"`
	// Lag is null when Redis cannot tell.
	Lag *int64 `json:"lag"`
}

// LeaseInfo is a held lease as seen in a partition's group.
type LeaseInfo struct {
	Owner      string `json:"owner"`
	Generation int64  `json:"generation"`
	// TTLMs is the time left; null when the key has no expiry (which
	// Protean never sets, but a hand-made key may).
	TTLMs *int64 `json:"ttlMs"`
	// Token is the raw lease value, owner:generation, the fence every
	// repair of the partition is planned against. When the value does not
	// parse as owner:generation, Owner is the raw value and Generation 0.
	Token string `json:"token"`
}

// Group is one consumer group's view of a partition. Groups are the union
// of the groups created on the partition's lanes and the category's
// registered groups (and the Group filter of PartitionOptions).
type Group struct {
	Name string `json:"name"`
	// Pending counts entries delivered to the group and not acked, summed
	// over the lanes.
	Pending int64 `json:"pending"`
	// Lag counts entries not delivered to the group yet, summed over the
	// lanes. A group not created on a lane will read it from id 0, so the
	// whole lane counts. Null when Redis cannot tell (entries were deleted
	// from the middle of a lane since the group last read).
	Lag *int64 `json:"lag"`
	// LastDeliveredID is the group's position on the main lane; null when
	// the group is not created there.
	LastDeliveredID *string `json:"lastDeliveredId"`
	// Generation is the fence counter G:K:__generation__; null when the
	// partition has never been leased for the group, or when the key
	// could not be read (GenerationKnown).
	Generation *int64 `json:"generation"`
	// Lease is null when no lease is held (or the lease key could not be
	// read: LeaseState is then LeaseUnknown).
	Lease *LeaseInfo `json:"lease"`
	// LeaseState is held, released, expired or free (LeaseStateOf), or
	// LeaseUnknown (null) when the lease or generation key could not be
	// read; docs/cli.md has the table of their meanings.
	LeaseState LeaseState `json:"leaseState"`
	// Parked says whether the failure ledger has an entry for (group,
	// key); null when the Inspector has no ledger.
	Parked *bool `json:"parked"`
	// Registered is true for a group in the category's registry.
	Registered bool `json:"registered"`
	// Created is true when the group exists on at least one lane.
	Created bool `json:"created"`
	// Paused is the operator's pause entry that holds the partition back
	// for the group (`protctl pause`): who, when, why; absent when none.
	// The lag keeps counting while it is.
	Paused *pause.Entry `json:"paused,omitempty"`
	// Health is the group's status on the partition with the lag in
	// entries and seconds it was decided on (StatusOf); filled only with
	// PartitionOptions.Health (and by Partition), absent otherwise.
	Health *Health `json:"health,omitempty"`

	// leaseUnread and genUnread are set when the lease (generation) key
	// holds another Redis type than a string: what it says is unknown,
	// not missing (the partition's Err names the key).
	leaseUnread, genUnread bool
}

// GenerationKnown reports whether Generation is what Redis holds: false
// when the generation key could not be read (it holds another Redis
// type), so that a null Generation is unknown, not "never leased".
func (g *Group) GenerationKnown() bool { return !g.genUnread }

// Partition is one row of `partitions ls`.
type Partition struct {
	Category string `json:"category"`
	Key      string `json:"key"`
	Stream   string `json:"stream"` // the main lane
	// Length is the number of entries over all lanes.
	Length int64 `json:"length"`
	// LastEntryID is the newest entry of the main lane; null when empty.
	LastEntryID *string `json:"lastEntryId"`
	// IdleMs is the age of the newest entry over all lanes, by the
	// server's clock; null when every lane is empty.
	IdleMs *int64  `json:"idleMs"`
	Lanes  []Lane  `json:"lanes"`
	Groups []Group `json:"groups"`
	// Error is set when a lane could not be read (e.g. a key of the
	// partition holds another Redis type); the rest is what could be read.
	Error string `json:"error,omitempty"`
	err   error
}

// LengthKnown reports whether Length counts every lane's entries: false
// when a lane could not be read (its Error is set).
func (p *Partition) LengthKnown() bool {
	for i := range p.Lanes {
		if !p.Lanes[i].LengthKnown() {
			return false
		}
	}
	return true
}

// partitionJSON is Partition as JSON: Partition's fields with their tags,
// in their order, the length null when unknown. (A field added to
// Partition is added here too: TestLaneAndPartitionJSONKeepEveryField
// fails until it is.)
type partitionJSON struct {
	Category    string  `json:"category"`
	Key         string  `json:"key"`
	Stream      string  `json:"stream"`
	Length      *int64  `json:"length"`
	LastEntryID *string `json:"lastEntryId"`
	IdleMs      *int64  `json:"idleMs"`
	Lanes       []Lane  `json:"lanes"`
	Groups      []Group `json:"groups"`
	Error       string  `json:"error,omitempty"`
}

// MarshalJSON writes p with its length null when unknown (LengthKnown),
// as every unknown value is.
func (p Partition) MarshalJSON() ([]byte, error) {
	j := partitionJSON{Category: p.Category, Key: p.Key, Stream: p.Stream, LastEntryID: p.LastEntryID, IdleMs: p.IdleMs,
		Lanes: p.Lanes, Groups: p.Groups, Error: p.Error}
	if p.LengthKnown() {
		j.Length = &p.Length
	}
	return marshalJSON(j)
}

// marshalJSON is json.Marshal without HTML escaping, for MarshalJSON
// methods: the encoder that calls them escapes what it is told to
// (encoding/json escapes a MarshalJSON result for HTML only when its own
// encoder does), and the CLI's do not.
func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Err is the error Error describes, nil when every lane was read: a
// *broker.WrongTypeError (errors.As) when a lane's key holds another
// type, naming the key, its type and "stream". A listing that shows such
// a partition returns it, so that a wrong type is never a quiet row.
func (p *Partition) Err() error { return p.err }

// Group returns the partition's group named name.
func (p Partition) Group(name string) (Group, bool) {
	for _, g := range p.Groups {
		if g.Name == name {
			return g, true
		}
	}
	return Group{}, false
}

// Entry is a stream entry shown to an operator.
type Entry struct {
	Stream string `json:"stream"`
	ID     string `json:"id"`
	// Missing is set for a pending entry whose body was deleted.
	Missing bool `json:"missing"`
	// Envelope is the decoded data field; null when it is not an envelope
	// protctl understands (then Raw holds it).
	Envelope *broker.Envelope `json:"envelope"`
	// Raw is the data field as text when it did not decode as an
	// envelope; null otherwise. Other fields of the entry are in Fields.
	Raw    *string           `json:"raw"`
	Fields map[string]string `json:"fields,omitempty"`
	// Type and EventID are copied from the envelope's headers for tables.
	Type    string `json:"type,omitempty"`
	EventID string `json:"eventId,omitempty"`
}

// PendingEntry is one entry of a group's pending list (XPENDING, extended
// form).
type PendingEntry struct {
	Stream     string `json:"stream"`
	ID         string `json:"id"`
	Consumer   string `json:"consumer"`
	IdleMs     int64  `json:"idleMs"`
	Deliveries int64  `json:"deliveries"`
}

// VerdictState classifies a partition or a group for an operator.
type VerdictState string

// Verdict states, from most to least urgent.
const (
	// StateStuck: work is pending and not moving: a head delivered many
	// times (a poison message), pending entries held by a consumer whose
	// lease expired, or a head pending longer than StuckAfter.
	StateStuck VerdictState = "stuck"
	// StatePaused: an operator paused the partition for the group
	// (`protctl pause`): its owner holds it and reads nothing until
	// resumed; entries wait and the lag keeps counting.
	StatePaused VerdictState = "paused"
	// StateLagging: entries wait to be delivered and nothing is pending.
	StateLagging VerdictState = "lagging"
	// StateOrphan: the index names the partition but no lane exists.
	StateOrphan VerdictState = "orphan"
	// StateHealthy: the group is caught up or working (pending entries
	// young and delivered few times) under a held lease.
	StateHealthy VerdictState = "healthy"
	// StateIdle: nothing to do and no owner.
	StateIdle VerdictState = "idle"
)

// Verdict is the one-line answer to "why is this partition idle, stuck or
// healthy". Reason is a sentence, e.g. "halted on a poison message: head
// 1-2 delivered 7 times, pending 3m0s to consumer worker-1:5 whose lease
// is held".
type Verdict struct {
	State  VerdictState `json:"state"`
	Group  string       `json:"group,omitempty"` // the group the verdict is about
	Reason string       `json:"reason"`
}

// String is "state: reason" (or "state (group g): reason").
func (v Verdict) String() string {
	if v.Group == "" {
		return string(v.State) + ": " + v.Reason
	}
	return string(v.State) + " (group " + v.Group + "): " + v.Reason
}

// GroupDetail is a group in `partitions show`: the Group fields plus what
// the group handles next and why it is where it is.
type GroupDetail struct {
	Group
	// Head is what the group handles next: its oldest pending entry, or
	// when nothing is pending the first entry it has not been delivered
	// (main lane first, then backfill); null when caught up.
	Head *Entry `json:"head"`
	// HeadPending is the pending record of Head when Head is pending.
	HeadPending *PendingEntry `json:"headPending"`
	// PendingEntries is the group's pending list over the lanes, oldest
	// first per lane, at most ExplainOptions.PendingLimit per lane.
	PendingEntries []PendingEntry `json:"pendingEntries"`
	Verdict        Verdict        `json:"verdict"`
}

// PartitionDetail is `partitions show`: one partition explained.
type PartitionDetail struct {
	Category    string        `json:"category"`
	Key         string        `json:"key"`
	Stream      string        `json:"stream"`
	Length      int64         `json:"length"`
	LastEntryID *string       `json:"lastEntryId"`
	IdleMs      *int64        `json:"idleMs"`
	Lanes       []Lane        `json:"lanes"`
	Groups      []GroupDetail `json:"groups"`
	// Indexed is false when the key is not in the category's index.
	Indexed bool `json:"indexed"`
	// DLQLength is the length of C:K:dlq (0 when missing).
	DLQLength int64 `json:"dlqLength"`
	// Verdict is the most urgent of the groups' verdicts.
	Verdict Verdict `json:"verdict"`
	// ServerTime is the server clock the ages were measured against.
	ServerTime time.Time `json:"serverTime"`
}

// Partition returns the summary (the `partitions ls` row) of d.
func (d *PartitionDetail) Partition() Partition {
	p := Partition{
		Category: d.Category, Key: d.Key, Stream: d.Stream, Length: d.Length,
		LastEntryID: d.LastEntryID, IdleMs: d.IdleMs, Lanes: d.Lanes,
	}
	for _, g := range d.Groups {
		p.Groups = append(p.Groups, g.Group)
	}
	return p
}

// LeaseState is what a (group, key) lease is: held, or why nobody holds
// it. It is derived once, here (LeaseStateOf), from what Redis can tell:
// the lease key, the generation counter, the group's pending entries and
// lag, and the failure ledger; every screen (partitions ls and show,
// leases ls, check, topics, the dashboard) and every JSON document
// (groups[].leaseState, leases[].state, topic partitions[].state) prints
// these words. A released partition and an expired one look the same in
// Redis (no lease key, a counter); what tells them apart is whether work
// waits with nobody on it.
//
// Partition statuses built on these (OK, IDLE, LAGGING, STALLED, HALTED,
// ORPHANED) are a separate word set: a lease state says who holds the
// partition, not whether its work moves.
type LeaseState string

// Lease states. LeaseStates lists them in this order with their meaning.
const (
	// LeaseHeld: the lease key exists: an owner works the partition
	// under it (owner, generation and TTL are shown).
	LeaseHeld LeaseState = "held"
	// LeaseReleased: no lease key, a generation counter (it was leased),
	// and nothing waits with nobody on it: nothing pending and nothing
	// undelivered, or what waits is parked in the failure ledger. The
	// owner let it go (idle, or parked); a new entry or an operator's
	// retry wakes it. Healthy.
	LeaseReleased LeaseState = "released"
	// LeaseExpired: no lease key, a generation counter, and entries wait
	// (pending or not delivered, lag unknown counts) that are not parked:
	// nobody is on them until a node takes the partition. Its owner died
	// or stopped with work left, or entries arrived after a release (a
	// node wakes on them within its wait timeout).
	LeaseExpired LeaseState = "expired"
	// LeaseFree: neither a lease key nor a generation counter: never
	// leased.
	LeaseFree LeaseState = "free"
	// LeaseUnheld: no lease key, a generation counter, and the work
	// waiting is unknown: `leases ls` without --category finds leases by
	// a keyspace scan and cannot tell which category's streams they
	// guard, so it cannot tell released from expired.
	LeaseUnheld LeaseState = "unheld"
	// LeaseUnknown: the lease key, or the generation counter of a lease
	// not held, holds another Redis type than a string, so none of the
	// states above can be told (a free one least of all). It has no
	// word: JSON has null and tables "?", as for every unknown value,
	// and the command exits 9 naming the key. Not in LeaseStates.
	LeaseUnknown LeaseState = ""
)

// MarshalJSON writes the state's word, or null for LeaseUnknown.
func (s LeaseState) MarshalJSON() ([]byte, error) {
	if s == LeaseUnknown {
		return []byte("null"), nil
	}
	return marshalJSON(string(s))
}

// StateInfo is a state word with its meaning, for documentation and help
// (docs/cli.md's table of states is generated from LeaseStates and
// VerdictStates).
type StateInfo struct {
	State   string
	Meaning string
}

// LeaseStates lists every lease state with its meaning, in the order of
// the constants.
func LeaseStates() []StateInfo {
	return []StateInfo{
		{string(LeaseHeld), "the lease key exists: an owner works the partition; its TTL is shown"},
		{string(LeaseReleased), "no lease key, leased before, and nothing waits with nobody on it (nothing pending or undelivered, or what waits is parked): the owner let it go when idle or parked; healthy"},
		{string(LeaseExpired), "no lease key, leased before, and entries wait (pending or not delivered) that are not parked: nobody is on them until a node takes the partition (its owner died or stopped with work left and the lease ran out or was dropped, or entries arrived after a release)"},
		{string(LeaseFree), "no lease key and no generation counter: never leased"},
		{string(LeaseUnheld), "no lease key, leased before, waiting work unknown: leases ls without --category cannot read the streams, so cannot tell released from expired"},
	}
}

// NotHeldText says a lease that is not held in the words every screen
// uses: the state (LeaseStateOf), then the generation no lease has been
// held since: "released (none held since generation 10)", "free (never
// leased)". A state not known (read by key alone, or by an older plan)
// is said as "not held" rather than guessed.
func NotHeldText(state LeaseState, generation *int64) string {
	switch {
	case generation == nil:
		return string(LeaseFree) + " (never leased)"
	case state == LeaseReleased || state == LeaseExpired:
		return fmt.Sprintf("%s (none held since generation %d)", state, *generation)
	}
	return fmt.Sprintf("not held (none held since generation %d)", *generation)
}

// LeaseStateOf derives a group's lease state on a partition: the one rule
// behind every lease word protctl prints (see LeaseState).
func LeaseStateOf(g *Group) LeaseState {
	switch {
	case g.Lease != nil:
		return LeaseHeld
	case g.leaseUnread || g.genUnread:
		// A key of another type is neither held nor never leased.
		return LeaseUnknown
	case g.Generation == nil:
		return LeaseFree
	}
	waiting := g.Pending > 0 || g.Lag == nil || *g.Lag > 0
	if !waiting || (g.Parked != nil && *g.Parked) {
		return LeaseReleased
	}
	return LeaseExpired
}

// VerdictStates lists every verdict (partition) state with its meaning,
// most urgent first.
func VerdictStates() []StateInfo {
	return []StateInfo{
		{string(StateStuck), "work is pending and not moving: a head delivered many times (a poison message), pending entries with no lease held, a parked head, or a head pending longer than a minute"},
		{string(StatePaused), "an operator paused it (protctl pause): its owner holds the lease and reads nothing until protctl resume; the lag keeps counting"},
		{string(StateLagging), "entries wait to be delivered and nothing is pending"},
		{string(StateOrphan), "the index names the partition but no lane exists"},
		{string(StateHealthy), "caught up or working (pending entries young and delivered few times) under a held lease"},
		{string(StateIdle), "caught up and no lease held (released or never leased): nothing to do"},
	}
}

// Lease is one row of `leases ls`.
type Lease struct {
	// Category is known when the lease was found through a category's
	// index; null when found by a keyspace scan (a lease key does not
	// name its category).
	Category *string `json:"category"`
	Group    string  `json:"group"`
	Key      string  `json:"key"`
	// Owner, Generation and TTLMs come from the lease value; null unless
	// held. Generation falls back to the counter when the lease is not
	// held (see Counter).
	Owner      *string    `json:"owner"`
	Generation *int64     `json:"generation"`
	TTLMs      *int64     `json:"ttlMs"`
	State      LeaseState `json:"state"`
	// Token is the raw lease value; null unless held.
	Token *string `json:"token"`
	// Counter is the generation counter; null when never leased.
	Counter  *int64 `json:"counter"`
	LeaseKey string `json:"leaseKey"`
}

// GroupPosition is a group's position on one stream, as trim and repair
// plans record it.
type GroupPosition struct {
	Name            string `json:"name"`
	LastDeliveredID string `json:"lastDeliveredId"`
	Pending         int64  `json:"pending"`
	// OldestPendingID is null when nothing is pending.
	OldestPendingID *string `json:"oldestPendingId"`
	// Floor is the oldest entry the group still needs:
	// min(lastDeliveredId, oldestPendingId). Entries after lastDeliveredId
	// are needed too; the floor is what a trim may not pass.
	Floor string `json:"floor"`
}

// TrimInfo is what a trim of Stream to MaxLen would do, computed the way
// the broker's Trim computes it.
type TrimInfo struct {
	Stream string `json:"stream"`
	MaxLen int64  `json:"maxLen"`
	Exists bool   `json:"exists"`
	Length int64  `json:"length"`
	// FirstEntryID and LastEntryID are null when the stream is empty.
	FirstEntryID *string         `json:"firstEntryId"`
	LastEntryID  *string         `json:"lastEntryId"`
	Groups       []GroupPosition `json:"groups"`
	// MissingGroups are registered groups not created on the stream yet:
	// they will read it from 0, so nothing may be trimmed.
	MissingGroups []string `json:"missingGroups"`
	// Floor is the smallest group floor; null when no group exists.
	Floor *string `json:"floor"`
	// PinnedBy names the group whose floor is Floor (or the first missing
	// registered group); null when maxLen alone decides.
	PinnedBy *string `json:"pinnedBy"`
	// Removes is how many entries the trim would remove now.
	Removes int64 `json:"removes"`
	// Reason explains Removes in a sentence.
	Reason string `json:"reason"`
}

// OrphanKind classifies an fsck finding.
type OrphanKind string

// Orphan kinds.
const (
	// OrphanUnindexedStream: a partition stream (main or backfill lane)
	// whose key is not in the category's index: consumers will never
	// discover it.
	OrphanUnindexedStream OrphanKind = "unindexed-stream"
	// OrphanMissingStream: an index entry with no lane: harmless but
	// listed by every scan until reaped or republished.
	OrphanMissingStream OrphanKind = "missing-stream"
	// OrphanWrongType: an index entry whose lane key holds another Redis
	// type than a stream (Type says which): no consumer can read it, and
	// every command that reads it fails naming the key.
	OrphanWrongType OrphanKind = "wrong-type"
)

// Orphan is one finding of Fsck.
type Orphan struct {
	Kind     OrphanKind `json:"kind"`
	Category string     `json:"category"`
	Key      string     `json:"key"`
	Stream   string     `json:"stream"`
	Length   int64      `json:"length"`
	// Type is the Redis type the key holds, for OrphanWrongType (the
	// type expected is "stream").
	Type string `json:"type,omitempty"`
}

// FsckReport is the result of Fsck.
type FsckReport struct {
	Category string   `json:"category"`
	Indexed  int64    `json:"indexed"` // index entries checked
	Streams  int64    `json:"streams"` // partition streams found by the scan
	Orphans  []Orphan `json:"orphans"`
	// StaleConsumers are the consumers of the partition streams found
	// that hold no pending entries and are not the live lease's (see
	// StaleConsumer).
	StaleConsumers []StaleConsumer `json:"staleConsumers"`
}

// ScanProgress reports a paced keyspace scan's progress.
type ScanProgress struct {
	Calls   int   // SCAN calls made so far
	Scanned int64 // keys returned by the server so far
	Found   int64 // keys that matched what the scan looks for
	Done    bool  // the last report of the scan
}

// ScanOptions paces a keyspace scan. The zero value is the default.
type ScanOptions struct {
	// Count is the SCAN COUNT hint. Default 1000.
	Count int64
	// Pause is slept between SCAN calls so that a scan of a large,
	// busy keyspace does not hog the server. Default 1ms; negative means
	// no pause.
	Pause time.Duration
	// Progress, when set, is called after every SCAN call and once at the
	// end, from the calling goroutine.
	Progress func(ScanProgress)
}
