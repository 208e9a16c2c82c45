package tui

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/present"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/placement"
)

// viewKind names a list view.
type viewKind int

const (
	viewPartitions viewKind = iota
	viewLeases
	viewParked
	viewTopics
	viewNodes
	numViews
)

// viewDef is what a list view shows: its columns, the cells that identify
// a row across refreshes, its default order, and how rows are built.
type viewDef struct {
	name    string
	aliases []string
	cols    []column
	idCols  []int
	sort    sortSpec
	empty   string
}

var viewDefs = [numViews]viewDef{
	viewPartitions: {
		name:    "partitions",
		aliases: []string{"partition", "part", "pa", "p"},
		cols: []column{
			{title: "CATEGORY", min: 8, max: 24, sort: sortText},
			{title: "KEY", min: 12, max: 28, sort: sortText},
			{title: "GROUP", min: 8, max: 24, sort: sortText},
			{title: "LANES", min: 5, max: 22, drop: 2},
			{title: "LEN", right: true, sort: sortNum, num: 0, desc: true},
			{title: "LAG", right: true, sort: sortNum, num: 1, desc: true},
			{title: "PENDING", right: true, sort: sortNum, num: 2, desc: true},
			{title: "OWNER", min: 6, max: 18, sort: sortText},
			{title: "GEN", right: true, sort: sortNum, num: 3, desc: true, drop: 1},
			{title: "LEASE", right: true, sort: sortNum, num: 4},
			{title: "PARKED", sort: sortText, desc: true},
			{title: "IDLE", right: true, sort: sortNum, num: 5, desc: true},
			{title: "STATUS", min: 6, max: 8, sort: sortText, desc: true},
		},
		idCols: []int{0, 1, 2},
		sort:   sortSpec{col: 0},
		empty:  "No partitions.",
	},
	viewLeases: {
		name:    "leases",
		aliases: []string{"lease", "le", "l"},
		cols: []column{
			{title: "CATEGORY", min: 8, max: 24, sort: sortText},
			{title: "GROUP", min: 5, max: 28, sort: sortText},
			{title: "KEY", min: 6, max: 28, sort: sortText},
			{title: "STATE", sort: sortText},
			{title: "OWNER", min: 5, max: 20, sort: sortText},
			{title: "GEN", right: true, sort: sortNum, num: 0, desc: true},
			{title: "TTL", right: true, sort: sortNum, num: 1},
			{title: "LEASE-KEY", min: 9, max: 40, drop: 1},
		},
		idCols: []int{0, 1, 2},
		sort:   sortSpec{col: 1},
		empty:  "No leases.",
	},
	viewParked: {
		name:    "parked",
		aliases: []string{"park", "pk"},
		cols: []column{
			{title: "SUBSCRIPTION", min: 8, max: 28, sort: sortText},
			{title: "AGGREGATE", min: 8, max: 24, sort: sortText},
			{title: "PARTITION", min: 8, max: 28, sort: sortText},
			{title: "POSITION", min: 8, max: 20},
			{title: "ATTEMPTS", right: true, sort: sortNum, num: 0, desc: true},
			{title: "STATUS", sort: sortText},
			{title: "PARKED", right: true, sort: sortNum, num: 1, desc: true},
			{title: "ERROR", min: 10, max: 60},
		},
		idCols: []int{0, 1},
		sort:   sortSpec{col: 0},
		empty:  "Nothing is parked.",
	},
	viewTopics: {
		name:    "topics",
		aliases: []string{"topic", "to", "t"},
		cols: []column{
			{title: "SERVICE", min: 6, max: 16, sort: sortText},
			{title: "TOPIC", min: 6, max: 24, sort: sortText},
			{title: "PARTITION", right: true, sort: sortNum, num: 0},
			{title: "OWNER", min: 5, max: 20, sort: sortText},
			{title: "GEN", right: true, sort: sortNum, num: 1, desc: true},
			{title: "TTL", right: true, sort: sortNum, num: 2},
			{title: "SUBSCRIPTION", min: 8, max: 28, sort: sortText},
			{title: "CHECKPOINT", right: true, sort: sortNum, num: 3},
			{title: "HEAD", right: true, sort: sortNum, num: 4},
			{title: "LAG", right: true, sort: sortNum, num: 5, desc: true},
		},
		idCols: []int{0, 1, 2, 6},
		sort:   sortSpec{col: 1},
		empty:  "No topic partitions.",
	},
	viewNodes: {
		name:    "nodes",
		aliases: []string{"node", "no", "n"},
		cols: []column{
			{title: "SERVICE", min: 6, max: 16, sort: sortText},
			{title: "NODE", min: 6, max: 24, sort: sortText},
			{title: "STATE", sort: sortText},
			{title: "HELD", right: true, sort: sortNum, num: 0, desc: true},
			{title: "BACKING-OFF", min: 11, max: 24},
			{title: "PAUSED", min: 6, max: 24},
			{title: "THROTTLED", min: 9, max: 24},
			{title: "PARKED", right: true, sort: sortNum, num: 1, desc: true},
			{title: "LAST-SEEN", right: true, sort: sortNum, num: 2},
			{title: "ADMIN", min: 5, max: 22, drop: 1},
		},
		idCols: []int{0, 1},
		sort:   sortSpec{col: 0},
		empty:  "No live nodes.",
	},
}

// viewByName resolves a :command to a view.
func viewByName(name string) (viewKind, bool) {
	name = strings.ToLower(strings.TrimSpace(name))
	for k, d := range viewDefs {
		if name == d.name {
			return viewKind(k), true
		}
		for _, a := range d.aliases {
			if name == a {
				return viewKind(k), true
			}
		}
	}
	return 0, false
}

// snapshot is what a view last read: exactly one slice is set.
type snapshot struct {
	// partitions point into the pages the source handed over (a page is
	// not copied: Source.Partitions must not change a page it handed over)
	partitions []*inspect.Partition
	leases     []inspect.Lease
	parked     []ledger.Parked
	topics     []TopicPartition
	nodes      []runtime.NodeStatus
}

// Cell formats, the CLI's: "-" is unknown or none.

func esc(s string) string { return output.Escape(present.Dash(s)) }

func orKey(v *int64, unknown int64) int64 {
	if v == nil {
		return unknown
	}
	return *v
}

// partitionRows builds one row per partition and group (one row for a
// partition without groups), as `partitions ls` prints them. base is the
// index of parts[0] in the view's snapshot.
func partitionRows(parts []inspect.Partition, base int) []row {
	rows := make([]row, 0, len(parts)+len(parts)/2)
	for i := range parts {
		p := &parts[i]
		cat, key, lanes := esc(p.Category), esc(p.Key), present.Lanes(p.Lanes)
		length := present.Length(p)
		idle := present.Ms(p.IdleMs)
		if len(p.Groups) == 0 {
			r := newRow(base+i, cat, key, "-", lanes, length, "-", "-", "-", "-", "-", "-", idle, "-")
			// No group reads it: no lag and nothing pending (the CLI's
			// --sort-by lag counts 0), no lease.
			r.nums = []int64{p.Length, 0, 0, unknownLow, unknownHigh, orKey(p.IdleMs, unknownLow)}
			if p.Length > 0 {
				r.toneCol, r.tone = 5, toneWarn
			}
			rows = append(rows, r)
			continue
		}
		for j := range p.Groups {
			g := &p.Groups[j]
			lag := "?"
			if g.Lag != nil {
				lag = strconv.FormatInt(*g.Lag, 10)
			}
			if g.Paused != nil {
				// An operator's pause (protctl pause): the lag grows on
				// purpose.
				lag += " PAUSED"
			}
			owner, ttl := "-", "-"
			ttlKey := int64(unknownHigh)
			switch {
			case g.Lease != nil && g.Lease.TTLMs != nil:
				owner, ttl, ttlKey = esc(g.Lease.Owner), present.Ms(g.Lease.TTLMs), *g.Lease.TTLMs
			case g.Lease != nil:
				owner, ttl = esc(g.Lease.Owner), "none"
			default:
				// Not held: the lease state says why (released, expired,
				// free), in partitions ls's words, or "?" when unknown.
				ttl = present.LeaseState(g.LeaseState)
			}
			r := newRow(base+i, cat, key, esc(g.Name), lanes, length, lag, strconv.FormatInt(g.Pending, 10),
				owner, present.Generation(g), ttl, present.Bool(g.Parked), idle, present.Status(g.Health))
			r.nums = []int64{p.Length, orKey(g.Lag, unknownHigh), g.Pending, orKey(g.Generation, unknownLow), ttlKey, orKey(p.IdleMs, unknownLow)}
			r.group = g.Name
			switch {
			case g.Parked != nil && *g.Parked:
				r.toneCol, r.tone = 10, toneBad
			case g.LeaseState == inspect.LeaseExpired:
				r.toneCol, r.tone = 9, toneWarn
			case g.Lease == nil && g.Generation != nil:
				r.toneCol, r.tone = 9, toneMuted
			case g.Lag == nil || *g.Lag > 0:
				r.toneCol, r.tone = 5, toneWarn
			case g.Pending > 0:
				r.toneCol, r.tone = 6, toneWarn
			}
			rows = append(rows, r)
		}
	}
	return rows
}

func leaseRows(leases []inspect.Lease) []row {
	rows := make([]row, 0, len(leases))
	for i := range leases {
		l := &leases[i]
		owner := "-"
		if l.Owner != nil {
			owner = esc(*l.Owner)
		}
		r := newRow(i, esc(present.Str(l.Category)), esc(l.Group), esc(l.Key), present.LeaseState(l.State), owner,
			present.Int(l.Generation), present.Ms(l.TTLMs), esc(l.LeaseKey))
		r.nums = []int64{orKey(l.Generation, unknownLow), orKey(l.TTLMs, unknownHigh)}
		r.toneCol = 3
		switch l.State {
		case inspect.LeaseHeld:
			r.tone = toneGood
		case inspect.LeaseExpired:
			r.tone = toneWarn
		default:
			r.tone = toneMuted
		}
		rows = append(rows, r)
	}
	return rows
}

// parkedWhere is "category/key" for Redis, "topic/partition" for Kafka.
func parkedWhere(p *ledger.Parked) string {
	switch {
	case p.Topic != "":
		return p.Topic + "/" + p.Partition
	case p.Category != "":
		return p.Category + "/" + p.Partition
	}
	return p.Partition
}

func parkedRows(parked []ledger.Parked, now time.Time) []row {
	rows := make([]row, 0, len(parked))
	for i := range parked {
		p := &parked[i]
		age := "-"
		ageKey := int64(unknownLow)
		if !p.ParkedAt.IsZero() {
			d := now.Sub(p.ParkedAt)
			age, ageKey = output.HumanDuration(d.Truncate(time.Second)), d.Milliseconds()
		}
		r := newRow(i, esc(p.Subscription), esc(p.Aggregate), esc(parkedWhere(p)), esc(p.Position),
			strconv.Itoa(p.Attempts), esc(string(p.Status)), age, esc(firstLine(p.Error)))
		r.nums = []int64{int64(p.Attempts), ageKey}
		r.toneCol = 5
		switch p.Status {
		case ledger.StatusParked, ledger.StatusUnrecoverable:
			r.tone = toneBad
		case ledger.StatusRetrying:
			r.tone = toneWarn
		}
		rows = append(rows, r)
	}
	return rows
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

func topicRows(parts []TopicPartition) []row {
	rows := make([]row, 0, len(parts))
	for i := range parts {
		p := &parts[i]
		owner := "-"
		if p.Owner != nil {
			owner = esc(*p.Owner)
		}
		subs := p.Subscriptions
		if len(subs) == 0 {
			subs = []TopicSubscription{{}}
		}
		for _, s := range subs {
			lag := present.Int(s.Lag)
			r := newRow(i, esc(p.Service), esc(p.Topic), strconv.Itoa(int(p.Partition)), owner,
				present.Int(p.Generation), present.Ms(p.TTLMs), esc(s.Name), present.Int(s.Checkpoint), present.Int(p.Head), lag)
			r.nums = []int64{int64(p.Partition), orKey(p.Generation, unknownLow), orKey(p.TTLMs, unknownHigh),
				orKey(s.Checkpoint, unknownLow), orKey(p.Head, unknownLow), orKey(s.Lag, unknownHigh)}
			r.group = s.Name
			if s.Lag != nil && *s.Lag > 0 {
				r.toneCol, r.tone = 9, toneWarn
			}
			rows = append(rows, r)
		}
	}
	return rows
}

func listText(s []string) string { return output.Escape(present.List(s)) }

func nodeRows(nodes []runtime.NodeStatus, now time.Time) []row {
	rows := make([]row, 0, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		seen := "-"
		seenKey := int64(unknownHigh)
		if !n.LastSeen.IsZero() {
			d := now.Sub(n.LastSeen)
			seen, seenKey = relTime(d), d.Milliseconds()
		}
		r := newRow(i, esc(n.Service), esc(n.Node), esc(nodeStateText(n)), strconv.Itoa(len(n.Held)),
			listText(n.BackingOff), listText(n.Paused), listText(n.Throttled), strconv.Itoa(n.Parked), seen, esc(n.AdminAddr))
		r.nums = []int64{int64(len(n.Held)), int64(n.Parked), seenKey}
		r.toneCol = 2
		switch {
		case n.Mode != "" && n.Mode != placement.Active:
			r.tone = toneWarn
		case n.JoinState == runtime.JoinJoined:
			r.tone = toneGood
		case n.JoinState == runtime.JoinFailed:
			r.tone = toneBad
		default:
			r.tone = toneWarn
		}
		rows = append(rows, r)
	}
	return rows
}

// nodeStateText is the node's join state and, when an operator cordoned
// or drained it, the mode it acts on: "joined, draining", and "joined,
// drained" once a draining node holds nothing (docs/decisions/0046).
func nodeStateText(n *runtime.NodeStatus) string {
	switch {
	case n.Mode == "" || n.Mode == placement.Active:
		return string(n.JoinState)
	case n.Mode == placement.Draining && len(n.Held) == 0:
		return string(n.JoinState) + ", drained"
	}
	return string(n.JoinState) + ", " + string(n.Mode)
}

// relTime is "5s ago" for a positive d, "now" within a second.
func relTime(d time.Duration) string {
	switch {
	case d > -time.Second && d < time.Second:
		return "now"
	case d > 0:
		return output.HumanDuration(d.Truncate(time.Second)) + " ago"
	}
	return "in " + output.HumanDuration((-d).Truncate(time.Second))
}

// catStats are the header's totals of one category.
type catStats struct {
	partitions int
	leased     int // groups holding a lease
	expired    int // groups whose lease state is expired (work waits, no owner)
	lag        int64
	unknownLag bool
}

func (s *catStats) add(p *inspect.Partition) {
	s.partitions++
	for j := range p.Groups {
		g := &p.Groups[j]
		switch {
		case g.Lease != nil:
			s.leased++
		case g.LeaseState == inspect.LeaseExpired:
			s.expired++
		}
		if g.Lag == nil {
			s.unknownLag = true
		} else {
			s.lag += *g.Lag
		}
	}
}

// count formats n with thousands separators: 100,000.
func count[T int | int64](n T) string {
	s := strconv.FormatInt(int64(n), 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

var _ = fmt.Sprint
