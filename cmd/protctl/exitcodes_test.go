package main

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/protctl/protctl/internal/clierr"
)

// TestEveryExitCodeOfTheContract produces each exit code of docs/cli.md
// with the operator commands but 1, which no known input produces (a key
// of the wrong type, the old example, exits 9 now; 130 is TestPartitionsListWatchStopsOnInterrupt,
// 5 and 7 TestLeaseMovedBetweenPlanAndApply and TestApplyPartial, which
// need a state change between two invocations). In -o json mode each
// error is one JSON object on stderr with its code.
func TestEveryExitCodeOfTheContract(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	ctx := context.Background()
	if err := e.c.Set(ctx, "bad::cat:__partitions__", "not a set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	closed := closedPort(t)
	cases := []struct {
		name string
		args []string
		code int
		kind string
	}{
		{"success", []string{"partitions", "ls", s.Orders}, clierr.ExitOK, ""},
		{"wrong type: an index key holding a string", []string{"partitions", "ls", "bad::cat"}, clierr.ExitWrongType, "WRONG_TYPE"},
		{"usage: a bad flag value", []string{"partitions", "ls", "--sort-by", "size"}, clierr.ExitUsage, "USAGE"},
		{"usage: missing --group", []string{"partitions", "release", s.Orders, s.Halted}, clierr.ExitUsage, "USAGE"},
		{"usage: an invalid plan file", []string{"apply", "-f", writeTemp(t, `{"apiVersion":"protctl.dev/v1","kind":"Plan","layout":"protean","items":[{"action":"explode"}]}`)}, clierr.ExitUsage, "USAGE"},
		{"usage: a plan of another layout", []string{"apply", "-f", writeTemp(t, `{"apiVersion":"protctl.dev/v1","kind":"Plan","layout":"cluster","createdAt":"2026-03-01T12:00:00.000Z","items":[]}`), "--yes"}, clierr.ExitUsage, "USAGE"},
		{"usage: skip-head --id that is not a stream id", []string{"partitions", "skip-head", s.Orders, s.Halted, "--group", s.Projector, "--id", "garbage", "--yes"}, clierr.ExitUsage, "USAGE"},
		{"usage: seek --to an id in the future", []string{"partitions", "seek", s.Orders, s.Halted, "--group", s.Projector, "--to", "9999999999999-0", "--yes"}, clierr.ExitUsage, "USAGE"},
		{"usage: publish of something not an envelope", []string{"publish", s.Orders, "k", "--data", "[1]", "--yes"}, clierr.ExitUsage, "USAGE"},
		{"unavailable", []string{"partitions", "ls", s.Orders, "--redis", closed}, clierr.ExitUnavailable, "UNAVAILABLE"},
		{"not found: category", []string{"partitions", "ls", "no::such"}, clierr.ExitNotFound, "NOT_FOUND"},
		{"not found: partition", []string{"partitions", "show", s.Orders, "o-nope"}, clierr.ExitNotFound, "NOT_FOUND"},
		{"not found: parked aggregate", []string{"parked", "show", s.Projector, "o-nope"}, clierr.ExitNotFound, "NOT_FOUND"},
		{"not found: parked skip names skip-head", []string{"parked", "skip", s.Projector, s.Halted, "--reason", "x", "--yes"}, clierr.ExitNotFound, "NOT_FOUND"},
		{"refused: live owner without --force", []string{"partitions", "release", s.Orders, s.Halted, "--group", s.Projector, "--yes"}, clierr.ExitRefused, "REFUSED"},
		{"refused: no --yes without a terminal", []string{"partitions", "release", s.Orders, s.Halted, "--group", s.Projector, "--force"}, clierr.ExitRefused, "REFUSED"},
		{"partial: a dry run with a refused item", []string{"partitions", "reap", s.Orders, s.Cold, s.Lagging, "--dry-run"}, clierr.ExitPartial, "PARTIAL"},
		// docs/cli.md, Changes and guard rails: a dry run exits with the
		// plan's predicted outcome, and changes nothing even read-only.
		{"refused: a dry run whose only item would be refused", []string{"partitions", "release", s.Orders, s.Halted, "--group", s.Projector, "--dry-run"}, clierr.ExitRefused, "REFUSED"},
		{"success: a dry run in read-only mode", []string{"partitions", "release", s.Orders, s.Halted, "--group", s.Projector, "--force", "--dry-run", "--read-only"}, clierr.ExitOK, ""},
		{"check failed", []string{"check", "--max-lag", "0", "--category", s.Orders}, clierr.ExitCheckFailed, "CHECK_FAILED"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.run(append(c.args, "-o", "json")...)
			r.wantCode(t, c.code)
			if c.kind != "" && !strings.Contains(r.stderr, `"code":"`+c.kind+`"`) {
				t.Fatalf("stderr %q lacks code %s", r.stderr, c.kind)
			}
		})
	}
	t.Run("parked skip points to skip-head", func(t *testing.T) {
		r := e.run("parked", "skip", s.Projector, s.Halted, "--reason", "x", "--yes")
		if !strings.Contains(r.stderr, "protctl partitions skip-head CATEGORY "+s.Halted+" --group "+s.Projector) {
			t.Fatalf("stderr %q", r.stderr)
		}
	})
}

// closedPort is a Redis URL on a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "redis://" + addr + "/0"
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	path := t.TempDir() + "/plan.json"
	writeFile(t, path, content)
	return path
}
