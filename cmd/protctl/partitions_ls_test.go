package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
)

type lsItem struct {
	Category string  `json:"category"`
	Key      string  `json:"key"`
	IdleMs   *int64  `json:"idleMs"`
	Groups   []group `json:"groups"`
}

type group struct {
	Name    string `json:"name"`
	Pending int64  `json:"pending"`
	Lag     *int64 `json:"lag"`
	Lease   *struct {
		Owner string `json:"owner"`
		TTLMs *int64 `json:"ttlMs"`
	} `json:"lease"`
}

func lsKeys(t *testing.T, r result) []string {
	t.Helper()
	var doc struct {
		Kind  string   `json:"kind"`
		Items []lsItem `json:"items"`
	}
	decode(t, r.stdout, &doc)
	if doc.Kind != "PartitionList" {
		t.Fatalf("kind %q", doc.Kind)
	}
	keys := []string{}
	for _, it := range doc.Items {
		keys = append(keys, it.Key)
	}
	return keys
}

func TestPartitionsListFiltersSortsAndLimits(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	cases := []struct {
		name string
		args []string
		want string // keys in order
	}{
		{"every category, by key", nil, "p-1 p-ghost o-backfill o-cold o-halted o-healthy o-lagging o-never"},
		{"one category", []string{s.Orders}, "o-backfill o-cold o-halted o-healthy o-lagging o-never"},
		{"lagging", []string{s.Orders, "--lagging"}, "o-backfill o-halted o-lagging o-never"},
		{"owner", []string{s.Orders, "--owner", "node-a"}, "o-healthy"},
		{"by lag, most behind first", []string{s.Orders, "--group", s.Projector, "--sort-by", "lag"}, "o-lagging o-halted o-backfill o-never o-cold o-healthy"},
		{"by age, oldest first", []string{s.Orders, "--sort-by", "age", "--limit", "1"}, "o-cold"},
		// o-healthy's and o-backfill's 30s leases were set a moment apart.
		{"by ttl, closest to expiry first", []string{s.Orders, "--sort-by", "ttl", "--owner", "worker-1", "--limit", "1"}, "o-halted"},
		{"by ttl, leases before none", []string{s.Orders, "--sort-by", "ttl", "--lagging", "--limit", "2"}, "o-backfill o-halted"},
		{"limit after sorting", []string{s.Orders, "--limit", "2"}, "o-backfill o-cold"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.run(append([]string{"partitions", "ls", "-o", "json"}, c.args...)...)
			r.wantCode(t, 0)
			if got := strings.Join(lsKeys(t, r), " "); got != c.want {
				t.Fatalf("keys %q, want %q", got, c.want)
			}
		})
	}
}

func TestPartitionsListGroupFilterShowsOnlyThatGroup(t *testing.T) {
	e := newOpsEnv(t)
	r := e.run("partitions", "ls", e.s.Payments, "--group", e.s.Audit, "-o", "json")
	r.wantCode(t, 0)
	var doc struct{ Items []lsItem }
	decode(t, r.stdout, &doc)
	for _, it := range doc.Items {
		for _, g := range it.Groups {
			if g.Name != e.s.Audit {
				t.Fatalf("%s lists group %s with --group %s", it.Key, g.Name, e.s.Audit)
			}
		}
	}
}

func TestPartitionsListUsageAndNotFound(t *testing.T) {
	e := newOpsEnv(t)
	e.run("partitions", "ls", "--sort-by", "size").wantCode(t, clierr.ExitUsage)
	e.run("partitions", "ls", "--limit", "-1").wantCode(t, clierr.ExitUsage)
	r := e.run("partitions", "ls", "no::such", "-o", "json")
	r.wantCode(t, clierr.ExitNotFound)
	if !strings.Contains(r.stderr, `"code":"NOT_FOUND"`) || r.stdout != "" {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
}

// TestPartitionsListCategoriesFromContextAndScan: without CATEGORY the
// context's categories are listed (even one the scan cannot find, as it
// has no index yet) with those the scan finds, and on a terminal the
// scan's progress goes to stderr, never to stdout.
func TestPartitionsListCategoriesFromContextAndScan(t *testing.T) {
	e := newOpsEnv(t)
	cl := e.cli(true)
	dir := cl.env["XDG_CONFIG_HOME"] + "/protctl"
	writeFile(t, dir+"/config.yaml", "currentContext: local\ncontexts:\n  - name: local\n    redis: {url: "+e.srv.URL()+"}\n    categories: [empty::cat]\n")
	delete(cl.env, "PROTCTL_REDIS")
	r := cl.run("partitions", "ls", "-o", "json")
	r.wantCode(t, 0)
	if got := strings.Join(lsKeys(t, r), " "); got != "p-1 p-ghost o-backfill o-cold o-halted o-healthy o-lagging o-never" {
		t.Fatalf("keys %q", got)
	}
	if strings.Contains(r.stdout, "scanning") {
		t.Fatal("progress on stdout")
	}
	if !strings.Contains(r.stderr, "scanning for categories") {
		t.Fatalf("no progress on the terminal's stderr: %q", r.stderr)
	}
	cl.tty = false
	if r = cl.run("partitions", "ls", "-o", "json"); r.code != 0 || r.stderr != "" {
		t.Fatalf("without a terminal: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestPartitionsListWatchStopsOnInterrupt: -w lists again until the
// command is interrupted, then exits 130.
func TestPartitionsListWatchStopsOnInterrupt(t *testing.T) {
	e := newOpsEnv(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	cl := e.cli(false)
	cl.ctx = ctx
	out := &procOutput{}
	cl.configure = func(ios *output.IOStreams) { ios.Out = out }
	var r result
	done := make(chan struct{})
	go func() {
		defer close(done)
		r = cl.run("partitions", "ls", e.s.Orders, "-w", "--watch-interval", "10ms", "-o", "json")
	}()
	defer func() { cancel(nil); <-done }() // ends the watch if the wait below fails
	testenv.Eventually(t, 10*time.Second, "two lists", func() (bool, string) {
		n := strings.Count(out.String(), `"kind": "PartitionList"`)
		return n >= 2, fmt.Sprintf("listed %d times", n)
	})
	cancel(clierr.ErrInterrupted)
	<-done
	// Ctrl-C is how a watch ends: quietly, exit 0 (issue 18 item 11).
	r.wantCode(t, 0)
	if r.stderr != "" {
		t.Errorf("an interrupted watch printed %q", r.stderr)
	}
	if n := strings.Count(out.String(), `"kind": "PartitionList"`); n < 2 {
		t.Fatalf("listed %d times before the interrupt", n)
	}
}

// TestStreamedJSONListIsThePrintersDocument: partitions ls streams its
// JSON and JSONL item by item; the bytes must be exactly what
// Printer.PrintList writes, so -o json means one thing across commands.
func TestStreamedJSONListIsThePrintersDocument(t *testing.T) {
	lag := int64(3)
	id := "1-2"
	for _, items := range [][]inspect.Partition{
		nil,
		{{Category: "c", Key: "k<&>", LastEntryID: &id, Lanes: []inspect.Lane{{Name: "main"}}, Groups: []inspect.Group{{Name: "g", Lag: &lag}}}},
		{{Category: "c", Key: "a"}, {Category: "c", Key: "b", Error: "boom"}},
	} {
		for _, format := range []output.Format{output.FormatJSON, output.FormatJSONL} {
			ios, _, out, _ := output.Test()
			pr := output.NewPrinter(ios, output.PrinterOptions{Format: format})
			if err := pr.PrintList("Partition", items, output.TableSpec{}); err != nil {
				t.Fatal(err)
			}
			var streamed bytes.Buffer
			w := newJSONListWriter(&streamed, "Partition", format == output.FormatJSONL)
			for i := range items {
				if err := w.Add(&items[i]); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if streamed.String() != out.String() {
				t.Fatalf("%s streamed:\n%s\nprinter:\n%s", format, streamed.String(), out.String())
			}
		}
	}
}

// TestPartitionsListStreamsInChunks lists more partitions than several
// chunks in flight (inspect reads 250 per chunk, 4 at once), in key
// order, with a limit ending mid-chunk, and the same in JSONL and in the
// table (which holds every row).
func TestPartitionsListStreamsInChunks(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	const n, limit = 2500, 1101
	cat := testenv.Protean(t, c).Category("big::cat")
	ctx := context.Background()
	pipe := c.Pipeline()
	var want []string
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("k%05d", i)
		want = append(want, k)
		pipe.SAdd(ctx, broker.ProteanLayout.IndexKey(cat.Name()), k)
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: broker.ProteanLayout.Stream(cat.Name(), k), Values: []string{broker.DataField, "{}"}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	cl := newCLI(t)
	cl.env["PROTCTL_REDIS"] = srv.URL()
	r := cl.run("partitions", "ls", cat.Name(), "-o", "json")
	r.wantCode(t, 0)
	if got := lsKeys(t, r); !slices.Equal(got, want) {
		t.Fatalf("%d keys listed, want %d in order", len(got), len(want))
	}
	r = cl.run("partitions", "ls", cat.Name(), "-o", "jsonl", "--limit", fmt.Sprint(limit))
	r.wantCode(t, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != limit || !strings.Contains(lines[limit-1], `"key":"`+want[limit-1]+`"`) {
		t.Fatalf("%d lines, last %q", len(lines), lines[len(lines)-1])
	}
	r = cl.run("partitions", "ls", cat.Name(), "--no-headers")
	r.wantCode(t, 0)
	if rows := strings.Count(r.stdout, "\n"); rows != n {
		t.Fatalf("%d table rows, want %d", rows, n)
	}
}

// TestAppendIndentIsJSONIndent: the list writer's indenter gives exactly
// json.Indent's bytes, on tricky documents and on every golden file's
// compact form.
func TestAppendIndentIsJSONIndent(t *testing.T) {
	docs := []string{
		`{}`, `[]`, `{"a":{}}`, `{"a":[]}`, `[[],{},[{}]]`, `"x"`, `12`, `null`,
		`{"a":"{[,:]}\"\\","b":[1,2,{"c":null}],"d":"\u00e9\u2028<>&"}`,
		`{"k":"ends with backslash \\","n":-1.5e3,"t":true,"f":false}`,
		"{\"a\": [1, 2],\n \"b\":\t{}}",
	}
	golden, _ := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	for _, g := range golden {
		b, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		var c bytes.Buffer
		if err := json.Compact(&c, b); err != nil {
			t.Fatal(err)
		}
		docs = append(docs, c.String())
	}
	for _, d := range docs {
		var want bytes.Buffer
		if err := json.Indent(&want, []byte(d), "    ", "  "); err != nil {
			t.Fatalf("%q: %v", d, err)
		}
		if got := appendIndent(nil, []byte(d), "    ", "  "); string(got) != want.String() {
			t.Fatalf("appendIndent(%q):\n%s\njson.Indent:\n%s", d, got, want.String())
		}
	}
}

func FuzzAppendIndent(f *testing.F) {
	f.Add(`{"a":[1,{"b":"c\"d"}],"e":{}}`)
	f.Fuzz(func(t *testing.T, d string) {
		if !json.Valid([]byte(d)) {
			return
		}
		var want bytes.Buffer
		if err := json.Indent(&want, []byte(d), "    ", "  "); err != nil {
			return
		}
		// json.Indent keeps trailing whitespace; encoding/json never
		// writes any, so compare on what the writer is given.
		if strings.TrimRight(d, " \t\r\n") != d {
			return
		}
		if got := appendIndent(nil, []byte(d), "    ", "  "); string(got) != want.String() {
			t.Fatalf("appendIndent(%q) = %q, json.Indent %q", d, got, want.String())
		}
	})
}

// TestPartitionsListUnreadableKeys: what a key of the wrong type hides is
// null in JSON and "?" in the tables, the same in each, and the listing
// exits 9: a generation key of the wrong type leaves the lease state and
// the generation unknown (never "free"), and the length known; a lane
// key of the wrong type exists, and its length and the partition's are
// unknown (never 0 or "missing").
func TestPartitionsListUnreadableKeys(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	ctx := context.Background()
	l := broker.ProteanLayout
	const bad = "bad2::x"
	// No lease, and a generation key that is no string.
	e.c.Del(ctx, l.LeaseKey(s.Projector, s.Halted), l.GenerationKey(s.Projector, s.Halted))
	e.c.HSet(ctx, l.GenerationKey(s.Projector, s.Halted), "f", "v")
	e.c.SAdd(ctx, l.IndexKey(bad), "k1")
	e.c.HSet(ctx, l.Stream(bad, "k1"), "f", "v")

	type lane struct {
		Exists bool   `json:"exists"`
		Length *int64 `json:"length"`
	}
	type item struct {
		Key    string `json:"key"`
		Length *int64 `json:"length"`
		Lanes  []lane `json:"lanes"`
		Groups []struct {
			Name       string  `json:"name"`
			Generation *int64  `json:"generation"`
			LeaseState *string `json:"leaseState"`
		} `json:"groups"`
	}
	list := func(cat string) map[string]item {
		t.Helper()
		r := e.run("partitions", "ls", cat, "-o", "json")
		r.wantCode(t, clierr.ExitWrongType)
		var doc struct{ Items []item }
		decode(t, r.stdout, &doc)
		m := map[string]item{}
		for _, it := range doc.Items {
			m[it.Key] = it
		}
		return m
	}

	halted := list(s.Orders)[s.Halted]
	if halted.Length == nil || *halted.Length != 5 || len(halted.Groups) != 1 || halted.Groups[0].LeaseState != nil || halted.Groups[0].Generation != nil {
		t.Errorf("generation key of the wrong type: %+v", halted)
	}
	r := e.run("partitions", "ls", s.Orders)
	for _, line := range strings.Split(r.stdout, "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[1] == s.Halted {
			// CATEGORY KEY LENGTH GROUP PENDING LAG LEASE STATUS OWNER GEN
			if f[2] != "5" || f[6] != "?" || f[9] != "?" {
				t.Errorf("the row of %s: length %s, lease %s, gen %s; want 5, ?, ?\n%s", s.Halted, f[2], f[6], f[9], line)
			}
		}
	}

	k1 := list(bad)["k1"]
	if k1.Length != nil || len(k1.Lanes) != 1 || !k1.Lanes[0].Exists || k1.Lanes[0].Length != nil {
		t.Errorf("lane of the wrong type: %+v", k1)
	}
	r = e.run("partitions", "ls", bad, "-o", "wide")
	r.wantCode(t, clierr.ExitWrongType)
	if strings.Contains(r.stdout, "missing") || !strings.Contains(r.stdout, "main:?") {
		t.Errorf("-o wide:\n%s", r.stdout)
	}
}
