package present

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/pkg/broker"
)

func str(s string) *string { return &s }
func i64(v int64) *int64   { return &v }

func TestSeen(t *testing.T) {
	cases := []struct {
		name string
		it   repair.Item
		want string
	}{
		{"nothing seen", repair.Item{Action: repair.ActionTrim}, "-"},
		{"trim pinned", repair.Item{Action: repair.ActionTrim, Precondition: repair.Precondition{
			Trim: &inspect.TrimInfo{Floor: str("5-0"), PinnedBy: str("g"), Removes: 3, Length: 10}}},
			"floor 5-0 pinned by g; removes 3 of 10"},
		{"trim without floor", repair.Item{Action: repair.ActionTrim, Precondition: repair.Precondition{
			Trim: &inspect.TrimInfo{Removes: 0, Length: 2}}},
			"floor none; removes 0 of 2"},
		{"retry", repair.Item{Action: repair.ActionRetry, Precondition: repair.Precondition{
			Parked: &repair.ParkedState{Status: "parked", Position: "1-0", Attempts: 3}}},
			"parked at 1-0, 3 attempts"},
		{"dead-letter under a lease", repair.Item{Action: repair.ActionDeadLetter, Precondition: repair.Precondition{
			Pending: &inspect.PendingEntry{Deliveries: 7, Consumer: "w-1:5"}, Lease: str("w-1:5")}},
			"delivered 7 times to w-1:5; lease w-1:5"},
		// Not held with a generation: the state as partitions ls says it,
		// never "free" (that is never leased).
		{"release of a released lease", repair.Item{Action: repair.ActionRelease, Precondition: repair.Precondition{
			Generation: i64(4), LeaseState: inspect.LeaseReleased}},
			"lease released (none held since generation 4)"},
		{"release of an expired lease", repair.Item{Action: repair.ActionRelease, Precondition: repair.Precondition{
			Generation: i64(4), LeaseState: inspect.LeaseExpired}},
			"lease expired (none held since generation 4)"},
		{"release planned before leaseState was recorded", repair.Item{Action: repair.ActionRelease, Precondition: repair.Precondition{Generation: i64(4)}},
			"lease not held (none held since generation 4)"},
		{"release never leased", repair.Item{Action: repair.ActionRelease}, "lease free (never leased)"},
		{"prune-consumer", repair.Item{Action: repair.ActionPruneConsumer, Precondition: repair.Precondition{
			ConsumerPending: i64(0), Lease: str("w-2:9")}},
			"0 pending; lease w-2:9"},
		// The dashboard's copy of this text left a reap's leases out.
		{"reap with a lease held", repair.Item{Action: repair.ActionReap, Precondition: repair.Precondition{
			LastEntryID: str("9-0"), Leases: []repair.GroupLease{{Group: "a", Lease: str("w-1:5")}, {Group: "b"}}}},
			"last entry 9-0; lease w-1:5"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Seen(c.it); got != c.want {
				t.Fatalf("Seen = %q, want %q", got, c.want)
			}
		})
	}
}

func TestPendingCountsWhatApplyWouldTry(t *testing.T) {
	p := &repair.Plan{Items: []repair.Item{
		{Allowed: true},
		{Allowed: true, Result: repair.ResultSkipped},
		{Allowed: false},
		{Allowed: true},
	}}
	if n := Pending(p); n != 2 {
		t.Fatalf("Pending = %d, want 2", n)
	}
}

func TestLease(t *testing.T) {
	yes := true
	cases := []struct {
		name string
		g    inspect.Group
		want string
	}{
		{"held", inspect.Group{Lease: &inspect.LeaseInfo{Token: "w-1:5", TTLMs: i64(54_000)}}, "held by w-1:5 (TTL 54s)"},
		{"held without expiry", inspect.Group{Lease: &inspect.LeaseInfo{Token: "w-1:5"}}, "held by w-1:5 (no expiry)"},
		{"released parked", inspect.Group{Generation: i64(5), LeaseState: inspect.LeaseReleased, Parked: &yes},
			"released (parked; none held since generation 5)"},
		{"released idle", inspect.Group{Generation: i64(5), LeaseState: inspect.LeaseReleased},
			"released (idle; none held since generation 5)"},
		{"expired", inspect.Group{Generation: i64(5), LeaseState: inspect.LeaseExpired}, "expired (none held since generation 5)"},
		{"free", inspect.Group{LeaseState: inspect.LeaseFree}, "free (never leased)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Lease(&c.g); got != c.want {
				t.Fatalf("Lease = %q, want %q", got, c.want)
			}
		})
	}
}

func TestHead(t *testing.T) {
	cases := []struct {
		name string
		g    inspect.GroupDetail
		want string
	}{
		{"caught up", inspect.GroupDetail{}, "none: caught up"},
		{"pending envelope", inspect.GroupDetail{
			Head:        &inspect.Entry{ID: "1-0", Stream: "c:k", Envelope: &broker.Envelope{}, Type: "t.v1", EventID: "e-1"},
			HeadPending: &inspect.PendingEntry{Consumer: "w-1:5", Deliveries: 7, IdleMs: 180_000}},
			"1-0 on c:k, pending to w-1:5, delivered 7 times, idle 3m; type t.v1, id e-1"},
		{"not delivered, body deleted", inspect.GroupDetail{Head: &inspect.Entry{ID: "2-0", Stream: "c:k", Missing: true}},
			"2-0 on c:k, not delivered yet; its body was deleted"},
		{"not an envelope", inspect.GroupDetail{Head: &inspect.Entry{ID: "3-0", Stream: "c:k:backfill"}},
			"3-0 on c:k:backfill, not delivered yet; not an envelope"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Head(&c.g); got != c.want {
				t.Fatalf("Head = %q, want %q", got, c.want)
			}
		})
	}
}

func TestCells(t *testing.T) {
	yes := false
	for _, c := range []struct{ got, want string }{
		{Dash(""), "-"}, {Dash("x"), "x"},
		{Str(nil), "-"}, {Str(str("")), "-"}, {Str(str("a")), "a"},
		{Int(nil), "-"}, {Int(i64(-3)), "-3"},
		{Ms(nil), "-"}, {Ms(i64(1500)), "1s"}, {Duration(90_000), "1m30s"},
		{Bool(nil), "-"}, {Bool(&yes), "no"}, {YesNo(true), "yes"},
		{List(nil), "-"}, {List([]string{"a", "b"}), "a,b"},
		{Plural(1, "item", "items"), "item"}, {Plural(0, "item", "items"), "items"},
		{Lanes(nil), "-"},
		{Lanes([]inspect.Lane{{Name: "main", Exists: true, Length: 5}, {Name: "backfill", Exists: true, Length: 4}}), "main:5 backfill:4"},
		{Lanes([]inspect.Lane{{Name: "main"}}), "main:missing"},
		{ShellQuote("shop::order"), "shop::order"}, {ShellQuote(""), "''"}, {ShellQuote("it's"), `'it'\''s'`},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// stuckDetail is a partition halted on a poison head under a held lease.
func stuckDetail() *inspect.PartitionDetail {
	g := inspect.GroupDetail{
		Group: inspect.Group{Name: "app.P", Pending: 1, Lag: i64(4), LastDeliveredID: str("1-0"), Generation: i64(5),
			Lease: &inspect.LeaseInfo{Owner: "w-1", Generation: 5, Token: "w-1:5", TTLMs: i64(54_000)}, LeaseState: inspect.LeaseHeld},
		Head:           &inspect.Entry{ID: "1-0", Stream: "shop::order:o 1", Envelope: &broker.Envelope{}, Type: "t.v1"},
		HeadPending:    &inspect.PendingEntry{Stream: "shop::order:o 1", ID: "1-0", Consumer: "w-1:5", Deliveries: 7, IdleMs: 180_000},
		PendingEntries: []inspect.PendingEntry{{Stream: "shop::order:o 1", ID: "1-0", Consumer: "w-1:5", Deliveries: 7, IdleMs: 180_000}},
		Verdict:        inspect.Verdict{State: inspect.StateStuck, Group: "app.P", Reason: "halted"},
	}
	return &inspect.PartitionDetail{
		Category: "shop::order", Key: "o 1", Stream: "shop::order:o 1", Length: 5, LastEntryID: str("4-0"), IdleMs: i64(180_000),
		Lanes: []inspect.Lane{{Name: "main", Exists: true, Length: 5}}, Groups: []inspect.GroupDetail{g}, Indexed: true,
		Verdict: g.Verdict, ServerTime: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
	}
}

// The last entry's time is its age on a terminal, RFC 3339 without one
// (docs/cli.md, "Output"), the same instant by the server's clock.
func TestWritePartitionTimes(t *testing.T) {
	for _, c := range []struct {
		relative bool
		want     string
	}{
		{true, "Last entry:    4-0 (3m ago)\n"},
		{false, "Last entry:    4-0 (2026-03-01T11:57:00Z)\n"},
	} {
		var b strings.Builder
		if err := WritePartition(&b, stuckDetail(), Layout{RelativeTimes: c.relative, Table: func(io.Writer, string, []any, []output.Column) error { return nil }}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("RelativeTimes %v: no %q in\n%s", c.relative, c.want, b.String())
		}
	}
}

func TestWritePartition(t *testing.T) {
	var b strings.Builder
	var tables []string
	err := WritePartition(&b, stuckDetail(), Layout{RelativeTimes: true, Table: func(w io.Writer, kind string, items []any, cols []output.Column) error {
		tables = append(tables, kind)
		for _, it := range items {
			var cells []string
			for _, c := range cols {
				cells = append(cells, c.Header+"="+c.Value(it))
			}
			fmt.Fprintln(w, strings.Join(cells, " "))
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := `Partition:     shop::order o 1
Stream:        shop::order:o 1
Lanes:         main:5
Length:        5
Last entry:    4-0 (3m ago)
Indexed:       yes
Dead letters:  0

Group app.P
Lease:            held by w-1:5 (TTL 54s)
Generation:       5
Pending:          1
Lag:              4
Delivered up to:  1-0
Parked:           -
Head:             1-0 on shop::order:o 1, pending to w-1:5, delivered 7 times, idle 3m; type t.v1
Verdict:          stuck: halted
Status:           -
Pending entries:
STREAM=shop::order:o 1 ID=1-0 CONSUMER=w-1:5 DELIVERIES=7 IDLE=3m

Verdict:  stuck (group app.P): halted
`
	if got := b.String(); got != want {
		t.Fatalf("WritePartition wrote:\n%s\nwant:\n%s", got, want)
	}
	if len(tables) != 1 || tables[0] != "PendingEntry" {
		t.Fatalf("tables %v, want one PendingEntry table", tables)
	}
}

func TestWritePartitionWithoutVerdictEndsAfterTheGroups(t *testing.T) {
	d := &inspect.PartitionDetail{Category: "c", Key: "k"}
	var b strings.Builder
	if err := WritePartition(&b, d, Layout{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "Verdict") || !strings.HasSuffix(b.String(), "Dead letters:  0\n\n") {
		t.Fatalf("wrote:\n%s", b.String())
	}
}

func TestRepairHints(t *testing.T) {
	got := RepairHints(stuckDetail())
	want := []Hint{
		{repair.ActionDeadLetter, "To move the head 1-0 to shop::order:o 1:dlq and ack it:",
			"protctl partitions skip-head shop::order 'o 1' --group app.P --reason TEXT"},
		{repair.ActionRelease, "Then free the lease w-1:5 (its owner drops the partition and acquires it again):",
			"protctl partitions release shop::order 'o 1' --group app.P --force"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("hints\n%v\nwant\n%v", got, want)
	}
	// Delivered once: not a poison message yet, so no dead-letter hint.
	d := stuckDetail()
	d.Groups[0].HeadPending.Deliveries = 1
	if got := RepairHints(d); len(got) != 1 || got[0].Action != repair.ActionRelease {
		t.Fatalf("hints of a head delivered once: %v", got)
	}
	// Not stuck: no hints.
	d.Groups[0].Verdict.State = inspect.StateLagging
	if got := RepairHints(d); len(got) != 0 {
		t.Fatalf("hints of a lagging group: %v", got)
	}
}

func TestPlanColumns(t *testing.T) {
	it := repair.Item{Action: repair.ActionRelease, Target: repair.Target{Group: "g", Key: "k"},
		Precondition: repair.Precondition{Lease: str("w:1")}, Allowed: true, Reason: "held", Result: repair.ResultApplied, Detail: "released w:1"}
	var got []string
	for _, c := range PlanColumns(true) {
		got = append(got, c.Header+"="+c.Value(it))
	}
	want := "ACTION=release TARGET=lease of g on k SEEN=lease w:1 ALLOWED=yes RESULT=applied REASON=released w:1"
	if strings.Join(got, " ") != want {
		t.Fatalf("columns %q, want %q", strings.Join(got, " "), want)
	}
	if n := len(PlanColumns(false)); n != 5 {
		t.Fatalf("%d columns before an apply, want 5 (no RESULT)", n)
	}
}
