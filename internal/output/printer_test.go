package output

import (
	"bytes"
	"encoding/json"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

type item struct {
	Key      string  `json:"key"`
	Length   int64   `json:"length"`
	LastID   string  `json:"lastEntryId"`
	Owner    *string `json:"owner"`
	IdleMs   int64   `json:"idleMs"`
	Detail   string  `json:"detail"`
	Healthy  bool    `json:"-"`
	Attempts int     `json:"attempts,omitempty"`
}

func owner(s string) *string { return &s }

var items = []item{
	{Key: "order-1", Length: 3, LastID: "1709294405250-0", Owner: owner("node-1:4"), IdleMs: 1500, Detail: "ok", Healthy: true},
	{Key: "order-22", Length: 120, LastID: "1709294405999-1", IdleMs: 0, Detail: "lagging"},
}

var spec = TableSpec{Columns: []Column{
	Col("KEY", func(i item) string { return i.Key }),
	Col("LENGTH", func(i item) string { return formatInt(i.Length) }),
	Col("LAST ID", func(i item) string { return i.LastID }, WideOnly()),
	Col("STATE", func(i item) string { return i.Detail }, Toned(func(i item) Tone {
		if i.Healthy {
			return ToneGood
		}
		return ToneBad
	})),
}}

func formatInt(n int64) string { return strconv.FormatInt(n, 10) }

var ansiEscape = regexp.MustCompile("\x1b\\[")

func newTestPrinter(t *testing.T, f Format, tty bool) (*Printer, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	ios, _, out, errOut := Test()
	ios.SetTTY(tty)
	return NewPrinter(ios, PrinterOptions{Format: f}), out, errOut
}

func TestPrintListJSONEnvelope(t *testing.T) {
	p, out, _ := newTestPrinter(t, FormatJSON, false)
	if err := p.PrintList("Partition", items, spec); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		APIVersion string           `json:"apiVersion"`
		Kind       string           `json:"kind"`
		Items      []map[string]any `json:"items"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if doc.APIVersion != "protctl.dev/v1" || doc.Kind != "PartitionList" || len(doc.Items) != 2 {
		t.Fatalf("wrong envelope: %+v", doc)
	}
	if doc.Items[0]["lastEntryId"] != "1709294405250-0" || doc.Items[1]["owner"] != nil {
		t.Fatalf("items not encoded as tagged: %v", doc.Items)
	}
	if !strings.HasPrefix(out.String(), "{\n  \"apiVersion\": \"protctl.dev/v1\",\n  \"kind\": \"PartitionList\",") {
		t.Fatalf("envelope fields must come first and be indented:\n%s", out)
	}
}

func TestPrintListEmptyIsEmptyArrayNotNull(t *testing.T) {
	for _, f := range []Format{FormatJSON, FormatYAML} {
		p, out, _ := newTestPrinter(t, f, false)
		var none []item
		if err := p.PrintList("Lease", none, spec); err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := yaml.Unmarshal(out.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		if doc["kind"] != "LeaseList" {
			t.Fatalf("%s: kind %v", f, doc["kind"])
		}
		if got, ok := doc["items"].([]any); !ok || len(got) != 0 {
			t.Fatalf("%s: items = %#v, want []", f, doc["items"])
		}
	}
}

func TestPrintListJSONL(t *testing.T) {
	p, out, _ := newTestPrinter(t, FormatJSONL, false)
	if err := p.PrintList("Partition", items, spec); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("want one line per item, got %q", out)
	}
	for i, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %d not JSON: %v", i, err)
		}
		if m["key"] != items[i].Key {
			t.Fatalf("line %d: key %v", i, m["key"])
		}
		if _, ok := m["apiVersion"]; ok {
			t.Fatalf("jsonl items carry no envelope: %s", l)
		}
	}
}

func TestPrintListYAMLKeepsJSONNamesAndOrder(t *testing.T) {
	p, out, _ := newTestPrinter(t, FormatYAML, false)
	if err := p.PrintList("Partition", items[:1], spec); err != nil {
		t.Fatal(err)
	}
	want := `apiVersion: protctl.dev/v1
kind: PartitionList
items:
  - key: order-1
    length: 3
    lastEntryId: 1709294405250-0
    owner: node-1:4
    idleMs: 1500
    detail: ok
`
	if out.String() != want {
		t.Fatalf("yaml:\n%s\nwant:\n%s", out, want)
	}
}

func TestYAMLQuotesStringsThatLookLikeOtherTypes(t *testing.T) {
	p, out, _ := newTestPrinter(t, FormatYAML, false)
	obj := map[string]any{"a": "123", "b": "true", "c": nil, "d": "", "e": "null"}
	if err := p.PrintObject("Thing", obj, nil); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := yaml.Unmarshal(out.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	for k, v := range obj {
		if back[k] != v {
			t.Fatalf("%s: round trip gave %#v, want %#v\n%s", k, back[k], v, out)
		}
	}
}

func TestPrintTablePlainWithoutTTY(t *testing.T) {
	p, out, _ := newTestPrinter(t, FormatTable, false)
	if err := p.PrintList("Partition", items, spec); err != nil {
		t.Fatal(err)
	}
	want := "KEY        LENGTH   STATE\n" +
		"order-1    3        ok\n" +
		"order-22   120      lagging\n"
	if out.String() != want {
		t.Fatalf("table:\n%q\nwant:\n%q", out, want)
	}
}

func TestPrintTableWideAndNoHeaders(t *testing.T) {
	ios, _, out, _ := Test()
	p := NewPrinter(ios, PrinterOptions{Format: FormatWide, NoHeaders: true})
	if err := p.PrintList("Partition", items, spec); err != nil {
		t.Fatal(err)
	}
	want := "order-1    3     1709294405250-0   ok\n" +
		"order-22   120   1709294405999-1   lagging\n"
	if out.String() != want {
		t.Fatalf("wide table:\n%q\nwant:\n%q", out, want)
	}
}

func TestTableEmptySaysSoOnStderr(t *testing.T) {
	p, out, errOut := newTestPrinter(t, FormatTable, false)
	if err := p.PrintList("Partition", []item{}, TableSpec{Columns: spec.Columns, Empty: "No partitions found."}); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 || errOut.String() != "No partitions found.\n" {
		t.Fatalf("stdout %q stderr %q", out, errOut)
	}
}

func TestColourOnlyOnTTYWithoutNoColor(t *testing.T) {
	cases := []struct {
		name    string
		tty     bool
		noColor bool
		mode    ColorMode
		want    bool
	}{
		{"tty", true, false, ColorAuto, true},
		{"tty with NO_COLOR", true, true, ColorAuto, false},
		{"pipe", false, false, ColorAuto, false},
		{"pipe with --color always", false, false, ColorAlways, true},
		{"NO_COLOR with --color always", true, true, ColorAlways, true},
		{"tty with --color never", true, false, ColorNever, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ios, _, out, _ := Test()
			ios.SetTTY(c.tty)
			ios.SetNoColorEnv(c.noColor)
			ios.SetColorMode(c.mode)
			if ios.ColorEnabled() != c.want {
				t.Fatalf("ColorEnabled = %v, want %v", ios.ColorEnabled(), c.want)
			}
			p := NewPrinter(ios, PrinterOptions{Format: FormatTable})
			if err := p.PrintList("Partition", items, spec); err != nil {
				t.Fatal(err)
			}
			if got := ansiEscape.MatchString(out.String()); got != c.want {
				t.Fatalf("ANSI escapes present = %v, want %v:\n%q", got, c.want, out)
			}
		})
	}
}

func TestStyledTableStaysAligned(t *testing.T) {
	ios, _, out, _ := Test()
	ios.SetTTY(true)
	p := NewPrinter(ios, PrinterOptions{Format: FormatTable})
	if err := p.PrintList("Partition", items, spec); err != nil {
		t.Fatal(err)
	}
	plain := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(out.String(), "")
	want := "KEY        LENGTH   STATE\n" +
		"order-1    3        ok\n" +
		"order-22   120      lagging\n"
	if plain != want {
		t.Fatalf("styled table without its escapes:\n%q\nwant:\n%q", plain, want)
	}
}

func TestCellsAreEscaped(t *testing.T) {
	p, out, _ := newTestPrinter(t, FormatTable, false)
	evil := []item{{Key: "a\nb\x1b[31mred\tx\xff", Detail: "ok"}}
	if err := p.PrintList("Partition", evil, TableSpec{Columns: spec.Columns[:1]}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "\x1b") || strings.Count(out.String(), "\n") != 2 {
		t.Fatalf("control characters reached the terminal: %q", out)
	}
	if !strings.Contains(out.String(), `a\nb\x1b[31mred\tx\xff`) {
		t.Fatalf("escaped form missing: %q", out)
	}
}

func TestPrintObjectEnvelope(t *testing.T) {
	obj := struct {
		Version string  `json:"version"`
		Commit  *string `json:"commit"`
	}{"v1.0.0", nil}
	cases := []struct {
		format Format
		want   string
	}{
		{FormatJSON, "{\n  \"apiVersion\": \"protctl.dev/v1\",\n  \"kind\": \"Version\",\n  \"version\": \"v1.0.0\",\n  \"commit\": null\n}\n"},
		{FormatJSONL, `{"apiVersion":"protctl.dev/v1","kind":"Version","version":"v1.0.0","commit":null}` + "\n"},
		{FormatYAML, "apiVersion: protctl.dev/v1\nkind: Version\nversion: v1.0.0\ncommit: null\n"},
	}
	for _, c := range cases {
		p, out, _ := newTestPrinter(t, c.format, false)
		if err := p.PrintObject("Version", obj, nil); err != nil {
			t.Fatal(err)
		}
		if out.String() != c.want {
			t.Fatalf("%s:\n%q\nwant\n%q", c.format, out, c.want)
		}
	}
	// An empty object still gets its envelope.
	p, out, _ := newTestPrinter(t, FormatJSONL, false)
	if err := p.PrintObject("Empty", struct{}{}, nil); err != nil {
		t.Fatal(err)
	}
	if out.String() != `{"apiVersion":"protctl.dev/v1","kind":"Empty"}`+"\n" {
		t.Fatalf("empty object: %q", out)
	}
}

func TestPrintObjectRejectsNonObjects(t *testing.T) {
	p, _, _ := newTestPrinter(t, FormatJSON, false)
	if err := p.PrintObject("Number", 42, nil); err == nil {
		t.Fatal("a number has no fields to put beside apiVersion and kind")
	}
}

func TestPrintObjectTableUsesView(t *testing.T) {
	p, out, _ := newTestPrinter(t, FormatTable, false)
	err := p.PrintObject("Version", struct{}{}, func(w io.Writer, st Styles) error {
		return WriteFields(w, st, Field{Label: "Version", Value: "v1"}, Field{Label: "Go version", Value: "go1.26"})
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "Version:     v1\nGo version:  go1.26\n"
	if out.String() != want {
		t.Fatalf("view:\n%q\nwant\n%q", out, want)
	}
}

func TestPrintListWantsASlice(t *testing.T) {
	p, _, _ := newTestPrinter(t, FormatJSON, false)
	if err := p.PrintList("Partition", items[0], spec); err == nil {
		t.Fatal("a single item is not a list")
	}
}

func TestTimeCellsRelativeOnTTYAbsoluteOtherwise(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := now.Add(-3*time.Minute - 5*time.Second)
	ios, _, _, _ := Test()
	p := NewPrinter(ios, PrinterOptions{Now: func() time.Time { return now }})
	if got := p.Time(at.In(time.FixedZone("X", 3600))); got != "2026-03-01T11:56:55Z" {
		t.Fatalf("non-TTY time = %q", got)
	}
	ios.SetStdoutTTY(true)
	if got := p.Time(at); got != "3m5s ago" {
		t.Fatalf("TTY time = %q", got)
	}
	if got := p.Time(now.Add(90 * time.Second)); got != "in 1m30s" {
		t.Fatalf("future TTY time = %q", got)
	}
	if got := p.Time(time.Time{}); got != "-" {
		t.Fatalf("zero time = %q", got)
	}
}

func TestParseFormat(t *testing.T) {
	for _, s := range []string{"table", "wide", "json", "jsonl", "yaml"} {
		if f, err := ParseFormat(s); err != nil || string(f) != s {
			t.Fatalf("ParseFormat(%q) = %q, %v", s, f, err)
		}
	}
	if _, err := ParseFormat("xml"); err == nil {
		t.Fatal("xml is not a format")
	}
}

func TestJSONDoesNotEscapeHTML(t *testing.T) {
	for _, f := range []Format{FormatJSON, FormatJSONL} {
		p, out, _ := newTestPrinter(t, f, false)
		if err := p.PrintList("Parked", []map[string]string{{"error": "handler said <nil> & quit"}}, spec); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "handler said <nil> & quit") {
			t.Fatalf("%s: %s", f, out)
		}
	}
}
