package main

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

type checkDoc struct {
	OK     bool `json:"ok"`
	Checks []struct {
		Name      string   `json:"name"`
		OK        bool     `json:"ok"`
		Value     *int64   `json:"value"`
		Offenders []string `json:"offenders"`
	} `json:"checks"`
}

// TestCheckThresholds: check exits 8 when a threshold is crossed and 0
// otherwise, for parked entries, lag, lag age and expired leases (and
// nodes backing off), naming the offenders.
func TestCheckThresholds(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	orders := []string{"--category", s.Orders}
	cases := []struct {
		name     string
		setup    func(e *opsEnv)
		args     []string
		code     int
		offender string
	}{
		{"parked: none parked", nil, []string{"--max-parked", "0"}, 0, ""},
		{"parked: one parked", (*opsEnv).parkOnly, []string{"--max-parked", "0"}, 8, s.Halted},
		{"parked: one allowed", (*opsEnv).parkOnly, []string{"--max-parked", "1"}, 0, ""},
		{"lag: under", nil, append([]string{"--max-lag", "5"}, orders...), 0, ""},
		{"lag: over", nil, append([]string{"--max-lag", "4"}, orders...), 8, s.Lagging + " " + s.Projector + ": 5"},
		{"lag age: the cold entries are acked", nil, append([]string{"--max-lag-age", "1h"}, orders...), 0, ""},
		{"lag age: a day-old entry waits", (*opsEnv).unackCold, append([]string{"--max-lag-age", "1h"}, orders...), 8, s.Cold},
		{"expired leases: with entries waiting", nil, append([]string{"--no-expired-leases"}, orders...), 8, s.Lagging},
		{"expired leases: caught up", (*opsEnv).catchUpLagging, append([]string{"--no-expired-leases"}, orders...), 0, ""},
		{"backing off: a node reports one", (*opsEnv).heartbeat, []string{"--no-backing-off", "--service", "shop"}, 8, "node-b"},
		{"backing off: no live node of that service", (*opsEnv).otherService, []string{"--no-backing-off", "--service", "other"}, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newOpsEnv(t)
			if c.setup != nil {
				c.setup(e)
			}
			r := e.run(append([]string{"check", "-o", "json"}, c.args...)...)
			r.wantCode(t, c.code)
			var doc checkDoc
			decode(t, r.stdout, &doc)
			if doc.OK != (c.code == 0) || len(doc.Checks) != 1 {
				t.Fatalf("report %+v", doc)
			}
			if c.offender != "" && !strings.Contains(strings.Join(doc.Checks[0].Offenders, "\n"), c.offender) {
				t.Fatalf("offenders %q lack %q", doc.Checks[0].Offenders, c.offender)
			}
			if c.code == clierr.ExitCheckFailed && !strings.Contains(r.stderr, `"code":"CHECK_FAILED"`) {
				t.Fatalf("stderr %q", r.stderr)
			}
		})
	}
	t.Run("usage", func(t *testing.T) {
		e.run("check", "--no-backing-off").wantCode(t, clierr.ExitUsage)
		e.run("check", "--no-paused").wantCode(t, clierr.ExitUsage)
		e.run("check", "--max-lag-age", "0s").wantCode(t, clierr.ExitUsage)
	})
}

// TestCheckNoPausedIsADeprecatedAlias: the flag's name from before
// "paused" meant an operator's pause only still runs the back-off check,
// is hidden from help, and warns on stderr, leaving stdout the report.
func TestCheckNoPausedIsADeprecatedAlias(t *testing.T) {
	e := newOpsEnv(t)
	e.heartbeat()
	r := e.run("check", "-o", "json", "--no-paused", "--service", "shop")
	r.wantCode(t, clierr.ExitCheckFailed)
	var doc checkDoc
	decode(t, r.stdout, &doc)
	if len(doc.Checks) != 1 || doc.Checks[0].Name != "backingOff" || !strings.Contains(strings.Join(doc.Checks[0].Offenders, "\n"), "node-b") {
		t.Fatalf("report %+v", doc)
	}
	if !strings.Contains(r.stderr, "--no-paused has been deprecated, use --no-backing-off") {
		t.Fatalf("stderr lacks the deprecation warning: %q", r.stderr)
	}
	help := e.run("check", "--help")
	help.wantCode(t, 0)
	if strings.Contains(help.stdout, "no-paused") || !strings.Contains(help.stdout, "--no-backing-off") {
		t.Fatalf("help:\n%s", help.stdout)
	}
}

// TestCheckUnknownServiceIsNotFound: a --service Redis has no trace of
// exits 4 naming it whichever checks run, not only --no-backing-off; a
// known service with no live node passes.
func TestCheckUnknownServiceIsNotFound(t *testing.T) {
	e := newOpsEnv(t)
	e.otherService()
	cases := []struct {
		name string
		args []string
		code int
	}{
		{"max parked", []string{"--service", "nope", "--max-parked", "100"}, clierr.ExitNotFound},
		{"status PAUSED", []string{"--category", e.s.Orders, "--service", "nope", "--fail-on-status", "PAUSED"}, clierr.ExitNotFound},
		{"default checks", []string{"--category", e.s.Orders, "--service", "nope"}, clierr.ExitNotFound},
		{"backing off", []string{"--service", "nope", "--no-backing-off"}, clierr.ExitNotFound},
		{"one of two unknown", []string{"--service", "other", "--service", "nope", "--max-parked", "100"}, clierr.ExitNotFound},
		{"known, no live node", []string{"--service", "other", "--max-parked", "100"}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.run(append([]string{"check", "-o", "json"}, c.args...)...)
			r.wantCode(t, c.code)
			if c.code == clierr.ExitNotFound && (!strings.Contains(r.stderr, `"code":"NOT_FOUND"`) || !strings.Contains(r.stderr, `service \"nope\"`)) {
				t.Fatalf("stderr %q", r.stderr)
			}
		})
	}
}

func (e *opsEnv) parkOnly() { e.park() }

// otherService leaves service "other" a Kafka lease group's generation
// counter and no live node: a service known to Redis with nothing running.
func (e *opsEnv) otherService() {
	e.t.Helper()
	if err := e.c.Set(context.Background(), redisstore.TopicLeaseGroup("other", "orders").GenerationKey(0), "1", 0).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// unackCold delivers o-cold's day-old entries to a new group that does not
// ack them.
func (e *opsEnv) unackCold() {
	e.t.Helper()
	ctx := context.Background()
	st := broker.ProteanLayout.Stream(e.s.Orders, e.s.Cold)
	if err := e.c.XGroupCreate(ctx, st, "slow", "0").Err(); err != nil {
		e.t.Fatal(err)
	}
}

// catchUpLagging delivers and acks o-lagging's waiting entries.
func (e *opsEnv) catchUpLagging() {
	e.t.Helper()
	ctx := context.Background()
	st := broker.ProteanLayout.Stream(e.s.Orders, e.s.Lagging)
	msgs, err := e.c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: e.s.Projector, Consumer: "c", Streams: []string{st, ">"}}).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, m := range msgs[0].Messages {
		if err := e.c.XAck(ctx, st, e.s.Projector, m.ID).Err(); err != nil {
			e.t.Fatal(err)
		}
	}
}
