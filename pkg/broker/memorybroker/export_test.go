package memorybroker

import (
	"fmt"
	"slices"
	"strings"

	"github.com/protctl/protctl/pkg/broker"
)

// Dump renders the whole keyspace, pending lists included, so that a test
// can prove that a refused call changed nothing.
func Dump(b *Broker) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var sb strings.Builder
	keys := make([]string, 0, len(b.keys))
	for k := range b.keys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		o := b.keys[k]
		fmt.Fprintf(&sb, "%s %s", k, o.kind)
		switch o.kind {
		case kindString:
			fmt.Fprintf(&sb, " %q expire=%v\n", o.str, o.expireAt)
		case kindSet:
			fmt.Fprintf(&sb, " %v\n", o.set.sorted())
		case kindStream:
			s := o.stream
			fmt.Fprintf(&sb, " last=%s\n", s.lastID)
			for _, e := range s.entries {
				fmt.Fprintf(&sb, "  %s %q %v\n", e.id, e.data, e.fields)
			}
			names := make([]string, 0, len(s.groups))
			for n := range s.groups {
				names = append(names, n)
			}
			slices.Sort(names)
			for _, n := range names {
				g := s.groups[n]
				fmt.Fprintf(&sb, "  group %s delivered=%s\n", n, g.lastDelivered)
				var cs []string
				for c := range g.consumers {
					cs = append(cs, c)
				}
				slices.Sort(cs)
				for _, c := range cs {
					cons := g.consumers[c]
					fmt.Fprintf(&sb, "   consumer %s pending=%d:", c, cons.npending)
					cons.order.each(g.owns(cons), func(id broker.StreamID) bool {
						p := g.pel[id]
						fmt.Fprintf(&sb, " %s/%d@%v", id, p.deliveries, p.delivered)
						return true
					})
					sb.WriteString("\n")
				}
			}
		}
	}
	return sb.String()
}

// PutSet stores a set at key, which must not exist.
func PutSet(b *Broker, key string, members ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.keys[key] != nil {
		panic("PutSet: " + key + " exists")
	}
	st := b.ensureSet(key, nil)
	for _, m := range members {
		st.add(m)
	}
}

// EntryWaiters counts the registrations of blocked WaitForEntries calls.
func EntryWaiters(b *Broker) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, ws := range b.entryWaiters {
		n += len(ws)
	}
	return n
}
