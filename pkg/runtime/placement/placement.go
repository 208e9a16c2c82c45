// Package placement holds operator placement (protctl nodes cordon,
// drain, uncordon; protctl partitions move): the node modes and pins as
// stored, the Reader a Membership store implements to serve them, and the
// Snapshot the engines decide ownership with (HRW narrowed by pins and
// cordons). docs/decisions/0046-drain-cordon-move.md explains the design,
// docs/decisions/0040-runtime-packages.md why it is a package of its
// own.
package placement

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/protctl/protctl/pkg/runtime/hrw"
)

// Mode is what an operator asked of a node (protctl nodes cordon,
// drain, uncordon). It is state in the store, not in the node, so it
// survives the node's restart until it is uncordoned
// (docs/decisions/0046-drain-cordon-move.md).
type Mode string

const (
	// Active: no operator state; the node takes its HRW share. It is
	// never stored (uncordon deletes the record).
	Active Mode = "active"
	// Cordoned: the node takes no new partitions; it keeps those it
	// holds a lease on now (its status record's held list) until they
	// go idle.
	Cordoned Mode = "cordoned"
	// Draining: the node hands every partition off at its next batch
	// boundary and takes none; it stays running, ready to be stopped. A
	// draining node that holds nothing is reported "drained" (a word of
	// the reports, never stored).
	Draining Mode = "draining"
)

// ModeRecord is a node's stored operator state. JSON names are the
// CLI's stable fields.
type ModeRecord struct {
	Node   string    `json:"node"`
	Mode   Mode      `json:"mode"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// Pin asks that one partition be owned by one node (protctl partitions
// move). Scope is the Redis partitioned subscription (consumer group)
// or, for a Kafka topic's partitions, the lease group name "topic:<topic>"
// (a topic's partitions are leased once for every subscription of it);
// Partition is the Redis partition key or the Kafka partition number.
type Pin struct {
	Scope     string    `json:"scope"`
	Partition string    `json:"partition"`
	Node      string    `json:"node"`
	By        string    `json:"by,omitempty"`
	At        time.Time `json:"at"`
}

// TopicScope is the pin scope of topic's partitions.
func TopicScope(topic string) string { return "topic:" + topic }

// State is a service's stored operator placement: node modes
// and pins.
type State struct {
	Modes map[string]ModeRecord // node -> record; absent: active
	Pins  []Pin
	// Skipped are the stored records that did not decode (bad JSON, a
	// newer schema), each naming its key and field. They are left out
	// of Modes and Pins: one bad record must not stop membership changes.
	Skipped []error
}

// Reader is the optional capability of a Membership that stores
// operator placement (redisstore.Store). A Node whose Membership has it
// reads the placement with every heartbeat and on every signal from
// WatchPlacement.
type Reader interface {
	// ReadPlacement returns the service's node modes and pins.
	ReadPlacement(ctx context.Context, service string) (State, error)
	// WatchPlacement signals changes to the service's placement until ctx
	// ends or a signal may have been lost (the subscription broke); then
	// the channel closes, and the node watches again and re-reads.
	// Signals are hints: the node also re-reads on each heartbeat.
	WatchPlacement(ctx context.Context, service string) (<-chan struct{}, error)
}

// Snapshot is the operator placement the engines decide
// ownership with, beside the member list Host.Members returns (which
// already leaves out cordoned and draining nodes). It is immutable once
// built: engines may keep and share it.
type Snapshot struct {
	// kept: scope -> partition -> the cordoned node that keeps it (it
	// held the lease at its last heartbeat).
	kept map[string]map[string]string
	// pins: scope -> partition -> node, only pins whose node is a live,
	// active (not cordoned, not draining) member.
	pins map[string]map[string]string
}

// Host is the optional capability of a runtime.Host that applies
// operator placement (the Node's host implements it). Engines that find
// it ask it for the owner of each partition instead of plain HRW.
type Host interface {
	// Placement returns the current snapshot (nil: none, plain HRW). It
	// changes only together with a close of the Members channel.
	Placement() *Snapshot
}

// Owner returns the node that should own partition of scope: the pinned
// node when the pin's node is eligible, else the cordoned node that keeps
// it, else HRW over members under hrwKey. A nil Snapshot is plain HRW.
//
// self and holds make the keep exact on the cordoned node itself: the
// other nodes know what it holds only from its last status record, but
// it knows whether it holds the lease now (holds). A partition it kept
// and has since released (a Redis partition gone idle) is no longer kept
// by self, so it does not take it back when new entries arrive before its
// next heartbeat; HRW over members, which leave a cordoned node out,
// names another node, which takes it once self's next record no longer
// lists it.
func (pl *Snapshot) Owner(scope, partition, hrwKey string, members []string, self string, holds bool) string {
	if n, ok := pl.override(scope, partition, self, holds); ok {
		return n
	}
	return hrw.Owner(hrwKey, members)
}

// KeptBy is the cordoned node that keeps (scope, partition) according to
// the status records, "" when none does. An engine re-decides such a
// partition of its own when it releases the lease (Owner's holds).
func (pl *Snapshot) KeptBy(scope, partition string) string {
	if pl == nil {
		return ""
	}
	return pl.kept[scope][partition]
}

// override returns the owner Snapshot imposes on (scope, partition), if
// any: what Owner returns before falling back to HRW.
func (pl *Snapshot) override(scope, partition, self string, holds bool) (string, bool) {
	if pl == nil {
		return "", false
	}
	if n, ok := pl.pins[scope][partition]; ok {
		return n, true
	}
	n, ok := pl.kept[scope][partition]
	if ok && n == self && !holds {
		return "", false
	}
	return n, ok
}

// Equal reports whether two snapshots decide the same: a node re-decides
// its assignment only when the placement changed.
func (pl *Snapshot) Equal(o *Snapshot) bool {
	if pl == nil || o == nil {
		return pl == o || (pl.empty() && o.empty())
	}
	return maps.EqualFunc(pl.kept, o.kept, maps.Equal) && maps.EqualFunc(pl.pins, o.pins, maps.Equal)
}

func (pl *Snapshot) empty() bool {
	return pl == nil || (len(pl.kept) == 0 && len(pl.pins) == 0)
}

// Kept is one partition a cordoned node keeps: it held the lease at its
// last heartbeat (its status record's held list).
type Kept struct {
	Node, Scope, Partition string
}

// Build derives the snapshot from the stored state, the partitions
// cordoned nodes keep, and the eligible members: the live members that
// are neither cordoned nor draining. A pin to a node that is not eligible
// is left out, so its partition falls back to HRW.
func Build(st State, kept []Kept, eligible []string) *Snapshot {
	pl := &Snapshot{kept: map[string]map[string]string{}, pins: map[string]map[string]string{}}
	ok := make(map[string]bool, len(eligible))
	for _, n := range eligible {
		ok[n] = true
	}
	for _, p := range st.Pins {
		if !ok[p.Node] {
			continue // a pin to a dead, cordoned or draining node falls back
		}
		if pl.pins[p.Scope] == nil {
			pl.pins[p.Scope] = map[string]string{}
		}
		pl.pins[p.Scope][p.Partition] = p.Node
	}
	for _, k := range kept {
		if pl.kept[k.Scope] == nil {
			pl.kept[k.Scope] = map[string]string{}
		}
		pl.kept[k.Scope][k.Partition] = k.Node
	}
	return pl
}

// Of returns the placement of host (a runtime.Host), nil when it has
// none (it is not a Host). It takes any so that this package need not
// import the runtime's root, which imports it.
func Of(host any) *Snapshot {
	if ph, ok := host.(Host); ok {
		return ph.Placement()
	}
	return nil
}

// Part is one partition a capped assignment decides: its key in
// the assignment (the HRW key), its placement scope and name, and whether
// this node holds its lease now (see Owner).
type Part struct {
	Key, Scope, Partition string
	Holds                 bool
}

// Assign is hrw.Assign under a cap with pl's overrides counted against
// it: pins first, then the partitions cordoned nodes keep, each given to
// its node only while that node has room under capPerNode (in key order,
// so that every node decides the same); the rest, and any override that
// found no room, go by the capped HRW assignment over members with the
// room the overrides left. So no node holds more than capPerNode
// partitions of a subscription, pinned or not
// (docs/decisions/0046-drain-cordon-move.md). The result maps key to
// node; a key left out has no owner for now. A nil pl is hrw.Assign.
func (pl *Snapshot) Assign(parts []Part, members []string, capPerNode int, self string) map[string]string {
	keys := make([]string, 0, len(parts))
	for _, pt := range parts {
		keys = append(keys, pt.Key)
	}
	if pl.empty() {
		return hrw.Assign(keys, members, capPerNode)
	}
	parts = slices.Clone(parts)
	slices.SortFunc(parts, func(a, b Part) int { return strings.Compare(a.Key, b.Key) })
	owners := make(map[string]string, len(parts))
	used := map[string]int{}
	take := func(pt Part, n string) {
		if _, done := owners[pt.Key]; done || used[n] >= capPerNode {
			return
		}
		owners[pt.Key] = n
		used[n]++
	}
	for _, pt := range parts {
		if n, ok := pl.pins[pt.Scope][pt.Partition]; ok {
			take(pt, n)
		}
	}
	for _, pt := range parts {
		if _, pinned := pl.pins[pt.Scope][pt.Partition]; pinned {
			continue
		}
		if n, ok := pl.override(pt.Scope, pt.Partition, self, pt.Holds); ok {
			take(pt, n)
		}
	}
	rest := make([]string, 0, len(parts)-len(owners))
	for _, pt := range parts {
		if _, done := owners[pt.Key]; !done {
			rest = append(rest, pt.Key)
		}
	}
	maps.Copy(owners, hrw.AssignUsed(rest, members, capPerNode, used))
	return owners
}
