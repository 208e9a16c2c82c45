package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/internal/tui"
)

// `protctl demo --no-tui --duration D` runs with no server, prints a live
// line per second and the summary with the processed and parked counts,
// and exits 0. (The README runs it for 10s.)
func TestDemoNoTUI(t *testing.T) {
	cl := newCLI(t)
	r := cl.run("demo", "--no-tui", "--duration", "3s")
	r.wantCode(t, 0)
	if !regexp.MustCompile(`(?m)^ *\d+s  published \d+ \(\d+ poison\)  processed \d+  failed \d+  parked \d+  lag \d+`).MatchString(r.stdout) {
		t.Errorf("no live summary line:\n%s", r.stdout)
	}
	for _, want := range []string{
		"protctl demo: 3 nodes on the in-memory broker",
		"processed   ",
		"parked      ",
		"order       kept per key (0 violations)",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	if r.stderr != "" {
		t.Errorf("stderr: %s", r.stderr)
	}
}

// Without a terminal the dashboard is not attempted: the live summary is
// printed even without --no-tui.
func TestDemoWithoutTerminalPrintsSummary(t *testing.T) {
	r := newCLI(t).run("demo", "--duration", "1s")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, "processed") {
		t.Errorf("stdout:\n%s", r.stdout)
	}
}

// -o json prints the summary as one JSON object on stdout (the live lines
// go to stderr).
func TestDemoJSONSummary(t *testing.T) {
	r := newCLI(t).run("demo", "--no-tui", "--duration", "2s", "--rate", "500", "-o", "json")
	r.wantCode(t, 0)
	var s struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Published  int64  `json:"published"`
		Parked     *int   `json:"parked"`
		Redis      struct {
			Processed       int64 `json:"processed"`
			OrderViolations int64 `json:"orderViolations"`
		} `json:"redis"`
		Nodes []struct {
			Node string `json:"node"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, r.stdout)
	}
	if s.Kind != "DemoSummary" || s.APIVersion != output.APIVersion || s.Published == 0 || s.Redis.Processed == 0 || s.Parked == nil || len(s.Nodes) != 3 {
		t.Errorf("summary %+v", s)
	}
	if !strings.Contains(r.stderr, "published") {
		t.Errorf("no live lines on stderr: %s", r.stderr)
	}
}

// On a terminal the dashboard attaches to the in-memory demo and shows
// its partitions; q quits, then the summary is printed.
func TestDemoDashboard(t *testing.T) {
	cl := newCLI(t)
	cl.tty = true
	// q once the dashboard shows the demo's partitions (the summary,
	// with "processed", is printed after it quits).
	cl.configure = func(s *output.IOStreams) { typeWhenShown(s, "q", "demo::order", "o-0") }
	r := cl.run("demo", "--duration", "1m")
	r.wantCode(t, 0)
	for _, want := range []string{"demo::order", "o-0", "processed"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
}

// With --redis the demo runs on that server, and the operator commands see
// it from outside.
func TestDemoOnRedis(t *testing.T) {
	srv := testenv.StartRedis(t)
	cl := newCLI(t)
	cl.run("demo", "--redis", srv.URL(), "--no-tui", "--duration", "2s").wantCode(t, 0)
	r := cl.run("partitions", "ls", "demo::order", "--redis", srv.URL(), "-o", "json")
	r.wantCode(t, 0)
	var list struct {
		Items []struct {
			Key string `json:"key"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Items) == 0 {
		t.Fatalf("partitions ls after the demo: %v\n%s", err, r.stdout)
	}
}

func TestDemoFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "--duration", "-1s"},
		{"demo", "--layout", "cluster"},
		{"demo", "--rate", "0"},
		{"demo", "extra"},
		{"demo", "--kafka=127.0.0.1:9092"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			newCLI(t).run(args...).wantCode(t, 2)
		})
	}
}

// The in-memory demo's closing line does not send the operator to
// protctl parked ls for state that ended with the demo, and the demo's
// help gives the refresh periods the demo and protctl tui really use
// (issue 18 item 9).
func TestDemoSaysWhatIsLeftAndItsRefresh(t *testing.T) {
	r := newCLI(t).run("demo", "--duration", "1s")
	r.wantCode(t, 0)
	parked := lineOf(strings.ReplaceAll(r.stdout, "  parked", "parked"), "parked ")
	if parked == "" || strings.Contains(parked, "see protctl parked ls") || !strings.Contains(parked, "gone now the demo ended") {
		t.Errorf("closing parked line %q\n%s", parked, r.stdout)
	}
	h := newCLI(t).run("demo", "--help")
	h.wantCode(t, 0)
	for _, want := range []string{"re-read every " + demoRefresh.String(), "re-reads every " + tui.DefaultRefresh.String()} {
		if !strings.Contains(strings.Join(strings.Fields(h.stdout), " "), want) {
			t.Errorf("demo --help lacks %q", want)
		}
	}
	th := newCLI(t).run("tui", "--help")
	if !strings.Contains(th.stdout, tui.DefaultRefresh.String()) {
		t.Errorf("tui --help does not give its default refresh %s", tui.DefaultRefresh)
	}
}
