package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/config"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/present"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

type partitionsListOptions struct {
	IO        *output.IOStreams
	Printer   *output.Printer
	Inspector func() (*inspect.Inspector, error)
	Settings  func() (*config.Settings, error)
	Broker    func() (*redisbroker.Broker, error)

	Categories []string
	Group      string
	Lagging    bool
	Owner      string
	SortBy     string
	Limit      int
	watch      watchOptions
}

var partitionSortKeys = []string{"key", "lag", "age", "ttl"}

func newPartitionsListCmd(f *Factory) *cobra.Command {
	opts := &partitionsListOptions{IO: f.IOStreams, Inspector: f.Inspector, Settings: f.Settings, Broker: f.Broker}
	cmd := &cobra.Command{
		Use:     "ls [CATEGORY...]",
		Aliases: []string{"list"},
		Short:   "List partitions: lanes, length, and per group pending, lag, lease, generation, TTL, parked",
		Long: `List the partitions of the named categories, read from each category's index
(never a keyspace scan) in pipelined pages. Without CATEGORY, every category:
those named in the context, plus those found by a paced SCAN for
*:__partitions__ keys (progress on stderr).

The table has one row per partition and group; -o json has one item per
partition with its groups. Lag counts the entries a group has not been
delivered yet (a group not created on a lane will read it from id 0);
pending counts the entries delivered and not acked. TTL is the time left on
the group's lease; "-" means no lease is held.

--sort-by orders by key (the default), lag (most behind first), age (the
newest entry's age, oldest first) or ttl (the lease closest to expiry
first). --limit keeps the first N after sorting. -w/--watch lists again
every --watch-interval until interrupted (Ctrl-C ends it with exit 0).

An unknown CATEGORY exits 4, and so does a filter naming what Redis has no
trace of: a --group neither created on a lane nor registered, an --owner
that holds no listed lease and is no live node of any service. A lease,
generation or lane key of the wrong Redis type is listed with an error and
exits 9.`,
		Example: `  protctl partitions ls
  protctl partitions ls shop::order --group app.OrderProjector --lagging
  protctl partitions ls shop::order --owner worker-1 --sort-by ttl
  protctl partitions ls shop::order --sort-by lag --limit 20 -o json
  protctl partitions ls shop::order -w`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Categories = args
			if !slices.Contains(partitionSortKeys, opts.SortBy) {
				return usageError(fmt.Errorf("invalid --sort-by %q: want one of %s", opts.SortBy, strings.Join(partitionSortKeys, ", ")))
			}
			if opts.Limit < 0 {
				return usageError(fmt.Errorf("invalid --limit %d: want 0 (no limit) or more", opts.Limit))
			}
			if err := opts.watch.validate(); err != nil {
				return err
			}
			opts.Printer = f.Printer()
			return runPartitionsList(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Group, "group", "", "show only this consumer group (listed even where it has not read yet)")
	fl.BoolVar(&opts.Lagging, "lagging", false, "only partitions where a group has entries not delivered yet")
	fl.StringVar(&opts.Owner, "owner", "", "only partitions with a lease held by this owner")
	fl.StringVar(&opts.SortBy, "sort-by", "key", "order: key, lag, age or ttl")
	fl.IntVar(&opts.Limit, "limit", 0, "list at most N partitions (after sorting); 0 for all")
	addWatchFlags(cmd, &opts.watch)
	_ = cmd.RegisterFlagCompletionFunc("sort-by", cobra.FixedCompletions(partitionSortKeys, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func runPartitionsList(ctx context.Context, opts *partitionsListOptions) error {
	ins, err := opts.Inspector()
	if err != nil {
		return err
	}
	return opts.watch.run(ctx, opts.IO, opts.Printer, func(ctx context.Context) error {
		return listPartitionsOnce(ctx, opts, ins)
	})
}

func listPartitionsOnce(ctx context.Context, opts *partitionsListOptions, ins *inspect.Inspector) error {
	cats := opts.Categories
	var empty []string
	var err error
	if len(cats) == 0 {
		if cats, err = resolveCategories(ctx, opts.IO, ins, opts.Settings); err != nil {
			return err
		}
	} else if empty, err = requireCategories(ctx, ins, cats); err != nil {
		return err
	}
	po := inspect.PartitionOptions{Group: opts.Group, Filter: partitionFilter(opts.Lagging, opts.Owner), Health: true}
	if f := opts.Printer.Format(); opts.SortBy == "key" && (f == output.FormatJSON || f == output.FormatJSONL) {
		return streamPartitions(ctx, opts, ins, cats, po)
	}
	parts, err := readPartitions(ctx, opts.IO, ins, cats, po)
	if err != nil {
		return err
	}
	if !opts.Lagging && opts.Owner == "" && len(parts) > 0 {
		// With another filter, the partitions that would show the group
		// created may be the ones dropped.
		if err := requireGroup(parts, opts.Group, cats); err != nil {
			return err
		}
	}
	if !opts.Lagging && opts.Owner != "" && len(parts) == 0 {
		// With --lagging too, the owner's partitions may be the ones
		// dropped for not lagging.
		if err := requireOwner(ctx, ins, opts.Owner, cats); err != nil {
			return err
		}
	}
	sorted := sortPartitions(parts, opts.SortBy)
	if opts.Limit > 0 && len(sorted) > opts.Limit {
		sorted = sorted[:opts.Limit]
	}
	if len(sorted) == 0 && len(empty) == len(cats) && !opts.Printer.Structured() {
		_, err := fmt.Fprint(opts.IO.Out, noLivePartitions(ins, empty))
		return err
	}
	if err := printPartitions(opts.IO, opts.Printer, sorted); err != nil {
		return err
	}
	return wrongTypes(sorted)
}

// requireGroup fails with NOT_FOUND when group (the --group filter) is
// neither created on a lane nor registered in any of parts: a typo would
// otherwise list every partition as not read by it. The caller calls it
// only with partitions listed and no other filter (--lagging, --owner
// drop partitions that would show the group); a streamed listing that saw
// the group nowhere passes nil.
func requireGroup(parts []inspect.Partition, group string, cats []string) error {
	if group == "" {
		return nil
	}
	for i := range parts {
		if g, ok := parts[i].Group(group); ok && (g.Created || g.Registered) {
			return nil
		}
	}
	return clierr.NotFound.Errorf("group %q reads no partition of %s: not created on any lane, not registered (check the spelling)", group, strings.Join(cats, ", "))
}

// errLimitReached stops a streamed listing at --limit.
var errLimitReached = errors.New("limit reached")

// streamPartitions prints the partitions of cats as -o json or jsonl in
// category and key order without holding them all: it reads each index's
// keys (SSCAN pages) and sorts them, then reads the partitions with
// inspect.EachPartitionByKey (pipelined chunks, several in flight) while
// earlier ones are encoded and written in order. Memory stays at the keys
// plus a few chunks, and Redis's work, the replies' parsing and the
// encoding overlap (docs/benchmarks.md, "CLI").
func streamPartitions(ctx context.Context, opts *partitionsListOptions, ins *inspect.Inspector, cats []string, po inspect.PartitionOptions) error {
	b, err := opts.Broker()
	if err != nil {
		return err
	}
	w := newJSONListWriter(opts.IO.Out, "Partition", opts.Printer.Format() == output.FormatJSONL)
	prog := opts.IO.NewProgress("reading partitions")
	defer prog.Done()
	n := 0
	var wrong error // the first key of the wrong type, returned at the end
	// groupSeen: the --group filter's group is created or registered on a
	// partition listed (else it is a typo, said at the end, as requireGroup).
	groupSeen, limited := false, false
	add := func(p inspect.Partition) error {
		if err := w.Add(&p); err != nil {
			return err
		}
		n++
		if n%1000 == 0 {
			prog.Update("%d partitions", n)
		}
		if opts.Limit > 0 && n >= opts.Limit {
			return errLimitReached
		}
		return nil
	}
	for _, c := range cats {
		keys, err := indexKeys(ctx, b, c)
		if err != nil {
			return err
		}
		if err := ins.EachPartitionByKey(ctx, c, keys, po, func(p inspect.Partition) error {
			if werr := p.Err(); errors.Is(werr, broker.ErrWrongType) && wrong == nil {
				wrong = werr
			}
			if g, ok := p.Group(opts.Group); ok && (g.Created || g.Registered) {
				groupSeen = true
			}
			return add(p)
		}); errors.Is(err, errLimitReached) {
			limited = true
			break
		} else if err != nil {
			return err
		}
	}
	prog.Done()
	if err := w.Close(); err != nil {
		return err
	}
	if wrong != nil {
		return wrong
	}
	if opts.Group != "" && n > 0 && !groupSeen && !limited && !opts.Lagging && opts.Owner == "" {
		return requireGroup(nil, opts.Group, cats)
	}
	if opts.Owner != "" && n == 0 && !opts.Lagging {
		return requireOwner(ctx, ins, opts.Owner, cats)
	}
	return nil
}

// indexKeys reads category's index with SSCAN pages, deduplicated (SSCAN
// may return a key twice) and sorted.
func indexKeys(ctx context.Context, b *redisbroker.Broker, category string) ([]string, error) {
	var keys []string
	var cursor uint64
	for {
		page, next, err := b.ScanPartitionKeys(ctx, category, cursor, 1000)
		if err != nil {
			return nil, err
		}
		keys = append(keys, page...)
		if cursor = next; cursor == 0 {
			break
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// readPartitions lists the partitions of cats, reporting progress on
// stderr.
func readPartitions(ctx context.Context, ios *output.IOStreams, ins *inspect.Inspector, cats []string, po inspect.PartitionOptions) ([]inspect.Partition, error) {
	var parts []inspect.Partition
	prog := ios.NewProgress("reading partitions")
	defer prog.Done()
	for _, c := range cats {
		n := 0
		err := ins.EachPartition(ctx, c, po, func(p inspect.Partition) error {
			parts = append(parts, p)
			n++
			prog.Update("%s: %d partitions", c, n)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return parts, nil
}

// partitionFilter keeps lagging partitions and those owned by owner.
func partitionFilter(lagging bool, owner string) func(*inspect.Partition) bool {
	if !lagging && owner == "" {
		return nil
	}
	return func(p *inspect.Partition) bool {
		if lagging && !isLagging(p) {
			return false
		}
		if owner != "" && !slices.ContainsFunc(p.Groups, func(g inspect.Group) bool {
			return g.Lease != nil && g.Lease.Owner == owner
		}) {
			return false
		}
		return true
	}
}

// isLagging: some group has entries not delivered yet (or Redis cannot
// tell how many), or entries wait and no group reads the partition.
func isLagging(p *inspect.Partition) bool {
	if len(p.Groups) == 0 {
		return p.Length > 0
	}
	for _, g := range p.Groups {
		if g.Lag == nil || *g.Lag > 0 {
			return true
		}
	}
	return false
}

// totalLag sums the groups' lag; unknown lag sorts first.
func totalLag(p *inspect.Partition) int64 {
	var n int64
	for _, g := range p.Groups {
		if g.Lag == nil {
			return 1<<63 - 1
		}
		n += *g.Lag
	}
	return n
}

// minTTL is the shortest lease TTL of the partition's groups; -1 when no
// lease with an expiry is held.
func minTTL(p *inspect.Partition) int64 {
	best := int64(-1)
	for _, g := range p.Groups {
		if g.Lease != nil && g.Lease.TTLMs != nil && (best < 0 || *g.Lease.TTLMs < best) {
			best = *g.Lease.TTLMs
		}
	}
	return best
}

// sortPartitions orders parts by by (then category and key, so the
// order is total). It sorts pointers: swapping 100,000 Partition values
// costs more than listing them.
func sortPartitions(parts []inspect.Partition, by string) []*inspect.Partition {
	ptrs := make([]*inspect.Partition, len(parts))
	for i := range parts {
		ptrs[i] = &parts[i]
	}
	byKey := func(a, b *inspect.Partition) int {
		return cmp.Or(cmp.Compare(a.Category, b.Category), cmp.Compare(a.Key, b.Key))
	}
	var f func(a, b *inspect.Partition) int
	switch by {
	case "lag":
		f = func(a, b *inspect.Partition) int { return cmp.Compare(totalLag(b), totalLag(a)) }
	case "age":
		idle := func(p *inspect.Partition) int64 {
			if p.IdleMs == nil {
				return -1
			}
			return *p.IdleMs
		}
		f = func(a, b *inspect.Partition) int { return cmp.Compare(idle(b), idle(a)) }
	case "ttl":
		// Held leases closest to expiry first; partitions without one last.
		f = func(a, b *inspect.Partition) int {
			ta, tb := minTTL(a), minTTL(b)
			switch {
			case ta < 0 && tb < 0:
				return 0
			case ta < 0:
				return 1
			case tb < 0:
				return -1
			}
			return cmp.Compare(ta, tb)
		}
	default:
		f = func(a, b *inspect.Partition) int { return 0 }
	}
	slices.SortFunc(ptrs, func(a, b *inspect.Partition) int { return cmp.Or(f(a, b), byKey(a, b)) })
	return ptrs
}

// partitionRow is one table row: a partition and one of its groups (nil
// for a partition without groups).
type partitionRow struct {
	p *inspect.Partition
	g *inspect.Group
}

func printPartitions(ios *output.IOStreams, pr *output.Printer, parts []*inspect.Partition) error {
	switch pr.Format() {
	case output.FormatJSON:
		// Written item by item: 100,000 partitions never sit in memory
		// as one encoded document (see docs/benchmarks.md, "CLI").
		return writeJSONList(ios.Out, "Partition", parts)
	case output.FormatJSONL, output.FormatYAML:
		return pr.PrintList("Partition", parts, output.TableSpec{})
	}
	var rows []partitionRow
	for _, p := range parts {
		if len(p.Groups) == 0 {
			rows = append(rows, partitionRow{p: p})
		}
		for j := range p.Groups {
			rows = append(rows, partitionRow{p: p, g: &p.Groups[j]})
		}
	}
	return pr.PrintList("Partition", rows, partitionTable(pr))
}

func partitionTable(pr *output.Printer) output.TableSpec {
	g := func(f func(g *inspect.Group) string) func(r partitionRow) string {
		return func(r partitionRow) string {
			if r.g == nil {
				return "-"
			}
			return f(r.g)
		}
	}
	return output.TableSpec{
		Empty: "No partitions found.",
		Columns: []output.Column{
			output.Col("CATEGORY", func(r partitionRow) string { return r.p.Category }),
			output.Col("KEY", func(r partitionRow) string { return r.p.Key }),
			// "?" when a lane could not be read: see ERROR (-o wide) and
			// the exit status.
			output.Col("LENGTH", func(r partitionRow) string { return present.Length(r.p) }),
			output.Col("GROUP", g(func(g *inspect.Group) string { return g.Name })),
			output.Col("PENDING", g(func(g *inspect.Group) string { return fmt.Sprint(g.Pending) }),
				output.Toned(func(r partitionRow) output.Tone {
					if r.g != nil && r.g.Pending > 0 {
						return output.ToneWarn
					}
					return output.ToneNone
				})),
			output.Col("LAG", g(func(g *inspect.Group) string {
				if g.Lag == nil {
					return "?"
				}
				return fmt.Sprint(*g.Lag)
			}), output.Toned(func(r partitionRow) output.Tone {
				if r.g != nil && (r.g.Lag == nil || *r.g.Lag > 0) {
					return output.ToneWarn
				}
				return output.ToneNone
			})),
			output.Col("LEASE", g(func(g *inspect.Group) string {
				if g.Paused != nil {
					// An operator's pause (protctl pause) holds it.
					return present.LeaseState(g.LeaseState) + " PAUSED"
				}
				return present.LeaseState(g.LeaseState)
			}),
				output.Toned(func(r partitionRow) output.Tone {
					if r.g == nil {
						return output.ToneNone
					}
					return leaseTone(r.g.LeaseState)
				})),
			output.Col("STATUS", g(func(g *inspect.Group) string { return present.Status(g.Health) }),
				output.Toned(func(r partitionRow) output.Tone {
					if r.g == nil {
						return output.ToneNone
					}
					return present.StatusTone(r.g.Health)
				})),
			output.Col("LAG-AGE", g(func(g *inspect.Group) string { return present.LagAge(g.Health) }), output.WideOnly()),
			output.Col("OWNER", g(func(g *inspect.Group) string {
				if g.Lease == nil {
					return "-"
				}
				return g.Lease.Owner
			})),
			output.Col("GEN", g(func(g *inspect.Group) string { return present.Generation(g) })),
			output.Col("TTL", g(func(g *inspect.Group) string {
				if g.Lease == nil {
					return "-"
				}
				if g.Lease.TTLMs == nil {
					return "none"
				}
				return present.Ms(g.Lease.TTLMs)
			})),
			output.Col("PARKED", g(func(g *inspect.Group) string { return present.Bool(g.Parked) }),
				output.Toned(func(r partitionRow) output.Tone {
					if r.g != nil && r.g.Parked != nil && *r.g.Parked {
						return output.ToneBad
					}
					return output.ToneNone
				})),
			output.Col("IDLE", func(r partitionRow) string { return present.Ms(r.p.IdleMs) }),
			output.Col("LANES", func(r partitionRow) string { return present.Lanes(r.p.Lanes) }, output.WideOnly()),
			output.Col("LAST-ENTRY", func(r partitionRow) string { return present.Str(r.p.LastEntryID) }, output.WideOnly()),
			output.Col("DELIVERED", g(func(g *inspect.Group) string { return present.Str(g.LastDeliveredID) }), output.WideOnly()),
			output.Col("ERROR", func(r partitionRow) string { return present.Dash(r.p.Error) }, output.WideOnly()),
		},
	}
}

// writeJSONList writes items as Printer.PrintList writes them for -o
// json, byte for byte, one item at a time (jsonListWriter).
func writeJSONList[T any](w io.Writer, kind string, items []T) error {
	lw := newJSONListWriter(w, kind, false)
	for i := range items {
		if err := lw.Add(items[i]); err != nil {
			return err
		}
	}
	return lw.Close()
}

// jsonListWriter writes a list as Printer.PrintList does for -o json (the
// indented document with apiVersion, kind and items) or -o jsonl (one
// compact item per line), byte for byte, an item at a time through a
// buffer: the memory it needs is one item's encoding, not the whole
// document's twice over.
type jsonListWriter struct {
	bw    *bufio.Writer
	buf   bytes.Buffer
	ind   []byte
	enc   *json.Encoder
	kind  string
	lines bool // jsonl
	n     int
	err   error
}

func newJSONListWriter(w io.Writer, kind string, lines bool) *jsonListWriter {
	lw := &jsonListWriter{bw: bufio.NewWriterSize(w, 256<<10), kind: kind, lines: lines}
	lw.enc = json.NewEncoder(&lw.buf)
	lw.enc.SetEscapeHTML(false)
	if !lines {
		kindJSON, _ := json.Marshal(kind + "List")
		apiJSON, _ := json.Marshal(output.APIVersion)
		fmt.Fprintf(lw.bw, "{\n  \"apiVersion\": %s,\n  \"kind\": %s,\n  \"items\": [", apiJSON, kindJSON)
	}
	return lw
}

// Add writes one item.
func (lw *jsonListWriter) Add(item any) error {
	if lw.err != nil {
		return lw.err
	}
	if p, ok := item.(*inspect.Partition); ok {
		return lw.addPartition(p)
	}
	lw.buf.Reset()
	if err := lw.enc.Encode(item); err != nil {
		lw.err = fmt.Errorf("output: encoding %s: %w", lw.kind, err)
		return lw.err
	}
	if lw.lines {
		_, lw.err = lw.bw.Write(lw.buf.Bytes())
	} else {
		if lw.n > 0 {
			lw.bw.WriteByte(',')
		}
		lw.bw.WriteString("\n    ")
		lw.ind = appendIndent(lw.ind[:0], bytes.TrimSuffix(lw.buf.Bytes(), []byte("\n")), "    ", "  ")
		_, lw.err = lw.bw.Write(lw.ind)
	}
	lw.n++
	return lw.err
}

// addPartition is Add for a partition, written by appendPartitionJSON.
func (lw *jsonListWriter) addPartition(p *inspect.Partition) error {
	if lw.lines {
		lw.ind = append(appendPartitionJSON(lw.ind[:0], p, "", ""), '\n')
	} else {
		if lw.n > 0 {
			lw.bw.WriteByte(',')
		}
		lw.bw.WriteString("\n    ")
		lw.ind = appendPartitionJSON(lw.ind[:0], p, "    ", "  ")
	}
	_, lw.err = lw.bw.Write(lw.ind)
	lw.n++
	return lw.err
}

// Close ends the document and flushes it.
func (lw *jsonListWriter) Close() error {
	if lw.err != nil {
		return lw.err
	}
	if !lw.lines {
		if lw.n > 0 {
			lw.bw.WriteString("\n  ")
		}
		lw.bw.WriteString("]\n}\n")
	}
	return lw.bw.Flush()
}

// appendIndent appends src, compact JSON as encoding/json writes it, to
// dst indented exactly as json.Indent(dst, src, prefix, indent) would:
// a newline, prefix and one indent per level after an opening bracket
// and each comma, "{}" and "[]" when empty, ": " after a key. It is a
// few times faster than json.Indent, which validates src with a full
// scanner (src here is encoding/json's own output), and listing 100,000
// partitions spends most of its encoding time indenting.
// Whitespace outside strings is dropped, as json.Indent drops it.
func appendIndent(dst, src []byte, prefix, indent string) []byte {
	depth := 0
	needIndent, inString, escaped := false, false, false
	newline := func() {
		dst = append(dst, '\n')
		dst = append(dst, prefix...)
		for i := 0; i < depth; i++ {
			dst = append(dst, indent...)
		}
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		if inString {
			// Copy the rest of the string up to its closing quote at once.
			j := i
			for ; j < len(src); j++ {
				b := src[j]
				if escaped {
					escaped = false
				} else if b == '\\' {
					escaped = true
				} else if b == '"' {
					inString = false
					break
				}
			}
			if j == len(src) {
				j--
			}
			dst = append(dst, src[i:j+1]...)
			i = j
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		if needIndent && c != '}' && c != ']' {
			needIndent = false
			newline()
		}
		switch c {
		case '"':
			inString = true
			dst = append(dst, c)
		case '{', '[':
			dst = append(dst, c)
			depth++
			needIndent = true
		case '}', ']':
			depth--
			if needIndent {
				needIndent = false // empty: "{}" or "[]"
			} else {
				newline()
			}
			dst = append(dst, c)
		case ',':
			dst = append(dst, c)
			newline()
		case ':':
			dst = append(dst, ':', ' ')
		default:
			dst = append(dst, c)
		}
	}
	return dst
}
