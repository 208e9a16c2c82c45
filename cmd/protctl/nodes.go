package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/present"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/placement"
)

func newNodesCmd(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "nodes",
		Aliases: []string{"node"},
		Short:   "List the live nodes of a service from their status records",
		Example: `  protctl nodes ls --service shop`,
	}
	cmd.AddCommand(newNodesListCmd(f), newNodesCordonCmd(f), newNodesDrainCmd(f), newNodesUncordonCmd(f))
	return cmd
}

type nodesListOptions struct {
	IO        *output.IOStreams
	Printer   *output.Printer
	Inspector func() (*inspect.Inspector, error)

	Service string

	watch watchOptions
}

func newNodesListCmd(f *Factory) *cobra.Command {
	opts := &nodesListOptions{IO: f.IOStreams, Inspector: f.Inspector}
	cmd := &cobra.Command{
		Use:     "ls [--service S]",
		Aliases: []string{"list"},
		Short:   "List live nodes: join state, held partitions, backing off, paused, last seen",
		Long: `List the live nodes of a service from the status records they heartbeat to
Redis (protctl:{S}:node:*, and protctl:{S}:held:* for the partitions held):
join state, the partitions each holds with their
generations, the partitions backing off after a systemic failure
(BACKING-OFF: the runtime retries them on its own), those an operator paused
(PAUSED: protctl pause, until protctl resume), throttled partitions, parked
count and when it was last seen. A node whose heartbeat expired is not
listed. Without --service it lists the services found in Redis (their nodes'
status records and Kafka lease groups), to pick one from. A --service with
none of those (a typo) exits 4; a status record, held record or membership
set of the wrong Redis type exits 9.`,
		Example: `  protctl nodes ls --service shop
  protctl nodes ls --service shop -o json
  protctl nodes ls --service shop -w
  protctl nodes ls                 # no --service: the services found in Redis`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.watch.validate(); err != nil {
				return err
			}
			opts.Printer = f.Printer()
			return opts.watch.run(cmd.Context(), f.IOStreams, opts.Printer, func(ctx context.Context) error {
				return runNodesList(ctx, opts)
			})
		},
	}
	cmd.Flags().StringVar(&opts.Service, "service", "", "the service whose nodes to list")
	addWatchFlags(cmd, &opts.watch)
	return cmd
}

// nodeItem is a node's status record as the CLI prints it.
type nodeItem struct {
	Service   string     `json:"service"`
	Node      string     `json:"node"`
	AdminAddr *string    `json:"adminAddr"`
	JoinState string     `json:"joinState"`
	StartedAt *string    `json:"startedAt"`
	LastSeen  *string    `json:"lastSeen"`
	Held      []heldItem `json:"held"`
	// BackingOff: partitions held back by a systemic failure; Paused:
	// by an operator's pause (the one meaning of paused everywhere).
	BackingOff []string         `json:"backingOff"`
	Paused     []string         `json:"paused"`
	Throttled  []string         `json:"throttled"`
	Parked     int              `json:"parked"`
	Counters   map[string]int64 `json:"counters"`
	// Mode is the operator mode: active, cordoned, draining or drained
	// (draining, noticed by the node, and holding nothing).
	Mode       string             `json:"mode"`
	ModeBy     *string            `json:"modeBy"`
	ModeReason *string            `json:"modeReason"`
	ModeSince  *string            `json:"modeSince"`
	Pins       []pinItem          `json:"pins"`
	node       runtime.NodeStatus // for the table's relative times
}

// pinItem is a pin to a node (partitions move, topics move).
type pinItem struct {
	Scope     string  `json:"scope"`
	Partition string  `json:"partition"`
	By        *string `json:"by"`
	At        *string `json:"at"`
}

// withPlacement fills the item's mode and pins from the service's
// placement.
func (it *nodeItem) withPlacement(st placement.State) {
	it.Mode = inspect.NodeModeOf(st, it.node)
	if rec, ok := st.Modes[it.Node]; ok {
		it.ModeBy, it.ModeReason, it.ModeSince = strOrNull(rec.By), strOrNull(rec.Reason), output.TimestampOrNull(rec.At)
	}
	it.Pins = []pinItem{}
	for _, p := range st.Pins {
		if p.Node == it.Node {
			it.Pins = append(it.Pins, pinItem{Scope: p.Scope, Partition: p.Partition, By: strOrNull(p.By), At: output.TimestampOrNull(p.At)})
		}
	}
	slices.SortFunc(it.Pins, func(a, b pinItem) int {
		return cmp.Or(strings.Compare(a.Scope, b.Scope), strings.Compare(a.Partition, b.Partition))
	})
}

type heldItem struct {
	Subscription string  `json:"subscription"`
	Source       string  `json:"source"`
	Category     *string `json:"category"`
	Topic        *string `json:"topic"`
	Partition    string  `json:"partition"`
	Generation   int64   `json:"generation"`
}

func nodeItemOf(n runtime.NodeStatus) nodeItem {
	it := nodeItem{
		Service:    n.Service,
		Node:       n.Node,
		AdminAddr:  strOrNull(n.AdminAddr),
		JoinState:  string(n.JoinState),
		StartedAt:  output.TimestampOrNull(n.StartedAt),
		LastSeen:   output.TimestampOrNull(n.LastSeen),
		Held:       make([]heldItem, 0, len(n.Held)),
		BackingOff: append([]string{}, n.BackingOff...),
		Paused:     append([]string{}, n.Paused...),
		Throttled:  append([]string{}, n.Throttled...),
		Parked:     n.Parked,
		Counters:   n.Counters,
		Mode:       string(placement.Active),
		Pins:       []pinItem{},
		node:       n,
	}
	if it.Counters == nil {
		it.Counters = map[string]int64{}
	}
	for _, h := range n.Held {
		it.Held = append(it.Held, heldItem{
			Subscription: h.Subscription, Source: string(h.Source),
			Category: strOrNull(h.Category), Topic: strOrNull(h.Topic),
			Partition: h.Partition, Generation: h.Generation,
		})
	}
	return it
}

func runNodesList(ctx context.Context, opts *nodesListOptions) error {
	if opts.Service == "" {
		return listServices(ctx, opts.IO, opts.Printer, opts.Inspector, "protctl nodes ls --service S")
	}
	ins, err := opts.Inspector()
	if err != nil {
		return err
	}
	nodes, err := ins.Nodes(ctx, opts.Service)
	if err != nil {
		return dataErr(err)
	}
	if len(nodes) == 0 {
		if err := requireService(ctx, ins, opts.Service); err != nil {
			return err
		}
	}
	st, err := ins.Placement(ctx, opts.Service)
	if err != nil {
		return dataErr(err)
	}
	items := make([]nodeItem, len(nodes))
	for i, n := range nodes {
		items[i] = nodeItemOf(n)
		items[i].withPlacement(st)
	}
	pr := opts.Printer
	return pr.PrintList("Node", items, output.TableSpec{
		Empty: fmt.Sprintf("No live nodes of service %q.", opts.Service),
		Columns: []output.Column{
			output.Col("NODE", func(n nodeItem) string { return n.Node }),
			output.Col("STATE", func(n nodeItem) string { return n.JoinState },
				output.Toned(func(n nodeItem) output.Tone {
					switch runtime.JoinState(n.JoinState) {
					case runtime.JoinJoined:
						return output.ToneGood
					case runtime.JoinFailed:
						return output.ToneBad
					}
					return output.ToneWarn
				})),
			output.Col("MODE", func(n nodeItem) string { return n.Mode },
				output.Toned(func(n nodeItem) output.Tone {
					if n.Mode == string(placement.Active) {
						return output.ToneNone
					}
					return output.ToneWarn
				})),
			output.Col("HELD", func(n nodeItem) string { return fmt.Sprint(len(n.Held)) }),
			output.Col("PINS", func(n nodeItem) string { return fmt.Sprint(len(n.Pins)) }, output.WideOnly()),
			output.Col("BACKING-OFF", func(n nodeItem) string { return present.List(n.BackingOff) },
				output.Toned(func(n nodeItem) output.Tone {
					if len(n.BackingOff) > 0 {
						return output.ToneWarn
					}
					return output.ToneNone
				})),
			output.Col("PAUSED", func(n nodeItem) string { return present.List(n.Paused) },
				output.Toned(func(n nodeItem) output.Tone {
					if len(n.Paused) > 0 {
						return output.ToneMuted
					}
					return output.ToneNone
				})),
			output.Col("THROTTLED", func(n nodeItem) string { return present.List(n.Throttled) }),
			output.Col("PARKED", func(n nodeItem) string { return fmt.Sprint(n.Parked) }),
			output.Col("LAST-SEEN", func(n nodeItem) string { return pr.Time(n.node.LastSeen) }),
			output.Col("ADMIN", func(n nodeItem) string { return present.Str(n.AdminAddr) }, output.WideOnly()),
			output.Col("STARTED", func(n nodeItem) string { return pr.Time(n.node.StartedAt) }, output.WideOnly()),
			output.Col("PARTITIONS", func(n nodeItem) string {
				parts := make([]string, 0, len(n.Held))
				for _, h := range n.Held {
					parts = append(parts, fmt.Sprintf("%s@%d", h.Partition, h.Generation))
				}
				return present.List(parts)
			}, output.WideOnly()),
		},
	})
}

// listServices prints the services found in Redis, for nodes ls and
// topics ls run without --service: what to pass to it (next says how).
func listServices(ctx context.Context, ios *output.IOStreams, pr *output.Printer, inspector func() (*inspect.Inspector, error), next string) error {
	ins, err := inspector()
	if err != nil {
		return err
	}
	prog := ios.NewProgress("scanning for services")
	svcs, err := ins.Services(ctx, inspect.ScanOptions{Progress: func(p inspect.ScanProgress) {
		prog.Update("%d keys scanned, %d service keys", p.Scanned, p.Found)
	}})
	prog.Done()
	if err != nil {
		return dataErr(err)
	}
	if !pr.Structured() && len(svcs) > 0 {
		fmt.Fprintf(ios.ErrOut, "No --service given; the services found in Redis (%s lists one):\n", next)
	}
	return pr.PrintList("Service", svcs, output.TableSpec{
		Empty: "No services found in Redis: no node status records (protctl:{S}:node:*) or Kafka lease groups (protctl:{S|topic:T}:*).",
		Columns: []output.Column{
			output.Col("SERVICE", func(s inspect.Service) string { return s.Name }),
			output.Col("NODES", func(s inspect.Service) string { return present.YesNo(s.Nodes) }),
			output.Col("TOPICS", func(s inspect.Service) string { return present.Dash(strings.Join(s.Topics, ",")) }),
		},
	})
}
