package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// heartbeat records two live nodes of service "shop", one with a paused
// partition.
func (e *opsEnv) heartbeat() {
	e.t.Helper()
	st := redisstore.New(e.c)
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, n := range []runtime.NodeStatus{
		{Service: "shop", Node: "node-a", AdminAddr: "127.0.0.1:7070", JoinState: runtime.JoinJoined, StartedAt: at, LastSeen: at,
			Held:     []runtime.HeldPartition{{Subscription: e.s.Projector, Source: source.Redis, Category: e.s.Orders, Partition: e.s.Healthy, Generation: 3}},
			Counters: map[string]int64{"processed": 10}},
		{Service: "shop", Node: "node-b", JoinState: runtime.JoinJoined, StartedAt: at, LastSeen: at,
			Held:   []runtime.HeldPartition{{Subscription: e.s.Projector, Source: source.Redis, Category: e.s.Orders, Partition: e.s.Backfill, Generation: 1}},
			Paused: []string{e.s.Backfill}},
	} {
		if err := st.Heartbeat(context.Background(), n, time.Minute); err != nil {
			e.t.Fatal(err)
		}
	}
}

// TestGoldenJSON runs every read-only command and every mutator's dry run
// with -o json on the Protean scenario and compares the document with
// testdata/golden (volatile values normalised; go test -update rewrites).
func TestGoldenJSON(t *testing.T) {
	e := newOpsEnv(t)
	e.park()
	e.heartbeat()
	s := e.s
	cases := []struct {
		name string
		args []string
		code int
	}{
		{"partitions-ls", []string{"partitions", "ls"}, 0},
		{"partitions-ls-lagging-by-lag", []string{"partitions", "ls", s.Orders, "--lagging", "--group", s.Projector, "--sort-by", "lag"}, 0},
		{"partitions-ls-owner", []string{"partitions", "ls", s.Orders, "--owner", s.HaltedOwner}, 0},
		{"partitions-show-halted", []string{"partitions", "show", s.Orders, s.Halted}, 0},
		{"partitions-show-backfill-payload", []string{"partitions", "show", s.Orders, s.Backfill, "--show-payload"}, 0},
		{"partitions-fsck", []string{"partitions", "fsck", s.Payments}, 0},
		{"leases-ls-category", []string{"leases", "ls", "--category", s.Orders}, 0},
		{"leases-ls-scan", []string{"leases", "ls"}, 0},
		{"parked-ls", []string{"parked", "ls"}, 0},
		{"parked-show", []string{"parked", "show", s.Projector, s.Halted}, 0},
		{"nodes-ls", []string{"nodes", "ls", "--service", "shop"}, 0},
		{"check-failing", []string{"check", "--max-parked", "0", "--max-lag", "4", "--no-expired-leases", "--no-paused", "--service", "shop"}, 8},
		{"check-passing", []string{"check", "--max-parked", "1", "--max-lag", "5", "--category", s.Orders}, 0},
		{"plan-reap", []string{"partitions", "reap", s.Orders, s.Cold, "--min-idle", "1h", "--dry-run"}, 0},
		{"plan-reap-refused", []string{"partitions", "reap", s.Orders, s.Lagging, s.Halted, s.Never, "--min-idle", "0s", "--dry-run"}, 6},
		{"plan-release", []string{"partitions", "release", s.Orders, s.Halted, "--group", s.Projector, "--force", "--dry-run"}, 0},
		{"plan-release-refused", []string{"partitions", "release", s.Orders, s.Halted, "--group", s.Projector, "--dry-run"}, 6},
		{"plan-skip-head", []string{"partitions", "skip-head", s.Orders, s.Halted, "--group", s.Projector, "--reason", "poison", "--dry-run"}, 0},
		{"plan-trim", []string{"streams", "trim", "billing::payment:p-1", "--maxlen", "1", "--dry-run"}, 0},
		{"plan-parked-retry", []string{"parked", "retry", s.Projector, s.Halted, "--dry-run"}, 0},
		{"plan-parked-skip", []string{"parked", "skip", s.Projector, s.Halted, "--reason", "bad amount", "--dry-run"}, 0},
		{"publish-dry-run", []string{"publish", s.Orders, "o-new", "--data", `{"data":{"n":1},"metadata":{"headers":{"type":"T"}}}`, "--dry-run"}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := e.digest()
			r := e.run(append(c.args, "-o", "json")...)
			r.wantCode(t, c.code)
			goldenJSON(t, c.name, r.stdout)
			if c.code != 0 && !strings.Contains(r.stderr, `"error":{`) {
				t.Fatalf("exit %d without a JSON error on stderr: %q", c.code, r.stderr)
			}
			if after := e.digest(); after != before {
				t.Fatal("a read or a dry run changed Redis")
			}
		})
	}
}

// TestJSONTimesAreRFC3339UTCMilliseconds: every time a command prints in
// JSON is RFC 3339 in UTC with milliseconds (the contract), whatever type
// the data layer holds it in.
func TestJSONTimesAreRFC3339UTCMilliseconds(t *testing.T) {
	e := newOpsEnv(t)
	e.park()
	e.heartbeat()
	s := e.s
	for _, args := range [][]string{
		{"partitions", "show", s.Orders, s.Halted},
		{"parked", "ls"},
		{"parked", "show", s.Projector, s.Halted},
		{"nodes", "ls", "--service", "shop"},
		{"partitions", "release", s.Orders, s.Halted, "--group", s.Projector, "--force", "--dry-run"},
	} {
		r := e.run(append(args, "-o", "json")...)
		r.wantCode(t, 0)
		for _, field := range []string{"serverTime", "parkedAt", "lastAttemptAt", "startedAt", "lastSeen", "createdAt"} {
			for _, m := range regexp.MustCompile(`"`+field+`": "([^"]*)"`).FindAllStringSubmatch(r.stdout, -1) {
				if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`).MatchString(m[1]) {
					t.Errorf("%v: %s %q is not RFC 3339 UTC with milliseconds", args, field, m[1])
				}
			}
		}
	}
}
