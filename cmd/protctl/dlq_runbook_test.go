package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
)

// dlqRunbookDefs defines the "replay dead letters after a fix" runbook of
// docs/operations.md (TestRunbooks runs it): the halted partition's head
// was skipped by an operator and its lease released (the stuck-protean
// runbook), and an entry of o-cold was dead-lettered by an older protctl
// (the earlier format) with a reason the fix does not cover.
func dlqRunbookDefs() map[string]runbookDef {
	dlqLen := func(rb *rbEnv, key string) int64 {
		rb.t.Helper()
		return rb.c.XLen(rb.ctx(), broker.ProteanLayout.DLQStream(rb.s.Orders, key)).Val()
	}
	haltedLen := func(rb *rbEnv) int64 {
		rb.t.Helper()
		return rb.c.XLen(rb.ctx(), broker.ProteanLayout.Stream(rb.s.Orders, rb.s.Halted)).Val()
	}
	return map[string]runbookDef{
		"dlq-replay": {
			setup: func(t *testing.T) *rbEnv {
				rb := standardRunbook(t)
				s := rb.s
				cl := newCLI(t)
				cl.env["PROTCTL_REDIS"] = rb.srv.URL()
				cl.run("partitions", "skip-head", s.Orders, s.Halted, "--group", s.Projector, "--reason", "poison: amount must be positive", "--yes").wantCode(t, 0)
				cl.run("partitions", "release", s.Orders, s.Halted, "--group", s.Projector, "--force", "--yes").wantCode(t, 0)
				testenv.Protean(t, rb.c).Category(s.Orders).Partition(s.Cold).
					OldDeadLetter("*", `{"data":{"amount":0}}`, "1700000000000-0", s.Projector, "bad data: refunded by hand")
				return rb
			},
			steps: []rbStep{
				{cmd: "protctl dlq ls shop::order", check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "o-cold", `\S+`, "1700000000000-0", "app.OrderProjector", `\S+`, "-", "bad data: refunded by hand")
					rb.wantRow(r, "o-halted", `\S+`, rb.s.HaltedIDs[0], "app.OrderProjector", `\S+`, "7", "poison: amount must be positive")
				}},
				{cmd: `protctl dlq replay shop::order --reason "amount must be positive" --dry-run -o json > replay.json`, check: func(rb *rbEnv, r result) {
					var p plannedDoc
					decode(rb.t, r.stdout, &p)
					if len(p.Items) != 1 || p.Items[0].Target["key"] != rb.s.Halted || !strings.Contains(p.Items[0].Reason, "append to shop::order:o-halted (after its newest entry") {
						rb.t.Errorf("plan %+v, want the o-halted dead letter alone", p.Items)
					}
					if dlqLen(rb, rb.s.Halted) != 1 || haltedLen(rb) != 5 {
						rb.t.Error("the dry run changed something")
					}
				}},
				{cmd: "protctl apply -f replay.json --yes", check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "dlq-replay", `entry \S+ of shop::order:o-halted:dlq`, ".*", "yes", "applied", "replayed to shop::order:o-halted as .*")
					if dlqLen(rb, rb.s.Halted) != 0 || haltedLen(rb) != 6 {
						rb.t.Errorf("after the replay: %d dead letters, %d entries", dlqLen(rb, rb.s.Halted), haltedLen(rb))
					}
					last := rb.c.XRevRangeN(context.Background(), broker.ProteanLayout.Stream(rb.s.Orders, rb.s.Halted), "+", "-", 1).Val()[0]
					var env struct {
						From *broker.ReplayOrigin `json:"_replayed_from"`
					}
					if err := json.Unmarshal([]byte(last.Values["data"].(string)), &env); err != nil || env.From == nil || env.From.OriginalID != rb.s.HaltedIDs[0] {
						rb.t.Errorf("the last entry %v is not the replayed head", last.Values)
					}
				}},
				{cmd: "protctl apply -f replay.json --yes", check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "dlq-replay", `.*`, "yes", "done", "already replayed, as .*")
					if haltedLen(rb) != 6 {
						rb.t.Error("the second apply replayed again")
					}
				}},
				{cmd: "protctl dlq purge shop::order --key o-cold --yes", check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "dlq-purge", `entry \S+ of shop::order:o-cold:dlq`, "dead letter of 1700000000000-0", "yes", "applied", ".*")
				}},
				{cmd: "protctl dlq ls shop::order", errOut: []string{"No dead letters."}, check: func(rb *rbEnv, r result) {
					if dlqLen(rb, rb.s.Cold) != 0 {
						rb.t.Error("o-cold's dead letter is still there")
					}
				}},
				{cmd: "protctl partitions show shop::order o-halted", out: []string{"Verdict:  lagging"}},
			},
		},
	}
}
