package audit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/audit"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
)

var origin = audit.Origin{User: "alice", Host: "ops-1", Context: "prod", CommandLine: "protctl partitions release shop::order o-1 --group g --force --yes", Version: "v1.0.0"}

func applied(outcome repair.Outcome, err error, results ...repair.Result) repair.Applied {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	p := &repair.Plan{APIVersion: repair.APIVersion, Kind: repair.PlanKind, Layout: "protean", CreatedAt: at.Add(-time.Minute)}
	for i, r := range results {
		action := repair.ActionRelease
		if i%2 == 1 {
			action = repair.ActionReap
		}
		lease := "worker-1:7"
		p.Items = append(p.Items, repair.Item{
			Action: action, Target: repair.Target{Category: "shop::order", Key: fmt.Sprintf("o-%d", i), Group: "g"},
			Precondition: repair.Precondition{Lease: &lease}, Allowed: true, Reason: "ok", Result: r,
		})
	}
	return repair.Applied{Plan: p, Outcome: outcome, Err: err, Attempted: len(results), StartedAt: at, FinishedAt: at.Add(250 * time.Millisecond)}
}

// TestRecordAndList: each recorded apply is one stream entry whose JSON
// carries who, where, the command line, the preconditions and each item's
// result; List returns them newest first, honours Limit and Since, and
// reads the flat fields too.
func TestRecordAndList(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	rec := audit.NewRecorder(c, origin)

	if got, err := audit.List(ctx, c, audit.ListOptions{}); err != nil || len(got) != 0 {
		t.Fatalf("a missing stream lists %v, %v; want an empty log", got, err)
	}
	if err := rec.RecordApply(ctx, applied(repair.OutcomeApplied, nil, repair.ResultApplied)); err != nil {
		t.Fatal(err)
	}
	if err := rec.RecordApply(ctx, applied(repair.OutcomePartial, nil, repair.ResultApplied, repair.ResultConflict)); err != nil {
		t.Fatal(err)
	}
	if err := rec.RecordApply(ctx, applied(repair.OutcomeApplied, context.Canceled, repair.ResultApplied)); err != nil {
		t.Fatal(err)
	}
	if n := c.XLen(ctx, audit.Key).Val(); n != 3 {
		t.Fatalf("%d entries, want 3", n)
	}
	got, err := audit.List(ctx, c, audit.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("listed %d entries, want 3", len(got))
	}
	newest, partial, first := got[0], got[1], got[2]
	if first.User != "alice" || first.Host != "ops-1" || first.Context != "prod" || first.CommandLine != origin.CommandLine || first.Version != "v1.0.0" {
		t.Fatalf("origin %+v", first)
	}
	if first.Outcome != "applied" || first.ExitCode != 0 || first.Summary != "1 applied" || len(first.Items) != 1 ||
		first.Items[0].Result != repair.ResultApplied || first.Items[0].Precondition.Lease == nil || *first.Items[0].Precondition.Lease != "worker-1:7" {
		t.Fatalf("first %+v", first)
	}
	if !first.Time.Equal(time.Date(2026, 3, 1, 12, 0, 0, 250e6, time.UTC)) || first.ID == "" {
		t.Fatalf("time %v id %q", first.Time, first.ID)
	}
	if partial.Outcome != "partial" || partial.ExitCode != 7 || strings.Join(partial.Actions, ",") != "release,reap" || partial.Items[1].Result != repair.ResultConflict {
		t.Fatalf("partial %+v", partial)
	}
	if newest.Outcome != audit.OutcomeError || newest.ExitCode != 130 || newest.Error != context.Canceled.Error() {
		t.Fatalf("an apply stopped by ctrl-c: %+v", newest)
	}
	if !(newest.ID > partial.ID && partial.ID > first.ID) {
		t.Fatalf("not newest first: %s %s %s", newest.ID, partial.ID, first.ID)
	}

	// The flat fields, for redis-cli.
	msgs := c.XRange(ctx, audit.Key, first.ID, first.ID).Val()
	if v := msgs[0].Values; v["user"] != "alice" || v["outcome"] != "applied" || v["actions"] != "release" || v["context"] != "prod" {
		t.Fatalf("flat fields %v", v)
	}

	if got, _ := audit.List(ctx, c, audit.ListOptions{Limit: 2}); len(got) != 2 || got[0].ID != newest.ID {
		t.Fatalf("limit 2: %d entries", len(got))
	}
	if got, _ := audit.List(ctx, c, audit.ListOptions{Since: time.Now().Add(time.Hour)}); len(got) != 0 {
		t.Fatalf("since an hour from now: %d entries", len(got))
	}
	if got, _ := audit.List(ctx, c, audit.ListOptions{Since: time.Now().Add(-time.Hour)}); len(got) != 3 {
		t.Fatalf("since an hour ago: %d entries", len(got))
	}
}

// TestListShowsWhatItCannotDecode: an entry written by something else is
// listed with its flat fields and the reason, not dropped.
func TestListShowsWhatItCannotDecode(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: audit.Key, Values: []any{"user", "bob", "outcome", "applied", "entry", "{not json"}}).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := audit.List(ctx, c, audit.ListOptions{})
	if err != nil || len(got) != 1 {
		t.Fatalf("%v %v", got, err)
	}
	if got[0].User != "bob" || got[0].Outcome != "applied" || !strings.Contains(got[0].Invalid, "undecodable") {
		t.Fatalf("%+v", got[0])
	}
}

// TestAppendFailsOnAKeyOfAnotherType: the error names the stream and
// wraps Redis's reply; List fails with a *broker.WrongTypeError naming
// the key, its type and "stream" (the CLI's exit 9).
func TestAppendFailsOnAKeyOfAnotherType(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	c.Set(ctx, audit.Key, "not a stream", 0)
	err := audit.NewRecorder(c, origin).RecordApply(ctx, applied(repair.OutcomeApplied, nil, repair.ResultApplied))
	var rerr redis.Error
	if err == nil || !strings.Contains(err.Error(), audit.Key) || !errors.As(err, &rerr) || !strings.HasPrefix(rerr.Error(), "WRONGTYPE") {
		t.Fatalf("error %v", err)
	}
	_, err = audit.List(ctx, c, audit.ListOptions{})
	var wte *broker.WrongTypeError
	if !errors.As(err, &wte) || wte.Key != audit.Key || wte.Got != "string" || wte.Want != "stream" {
		t.Fatalf("list error %v, want a *broker.WrongTypeError naming %s, string and stream", err, audit.Key)
	}
}

// TestStreamIsCapped: MAXLEN ~ keeps the stream near its cap.
func TestStreamIsCapped(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	rec := audit.NewRecorder(c, origin, audit.WithMaxLen(10))
	for i := 0; i < 350; i++ {
		if err := rec.RecordApply(ctx, applied(repair.OutcomeApplied, nil, repair.ResultApplied)); err != nil {
			t.Fatal(err)
		}
	}
	// Redis trims whole macro nodes (stream-node-max-entries, 100), so
	// "about 10" is at most one node more.
	if n := c.XLen(ctx, audit.Key).Val(); n < 10 || n > 110 {
		t.Fatalf("%d entries after 350 appends with a cap of ~10", n)
	}
}

// TestEntryItemsAreBounded: a huge plan's entry keeps MaxItems items and
// counts the rest; its summary counts them all.
func TestEntryItemsAreBounded(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	results := make([]repair.Result, 5)
	for i := range results {
		results[i] = repair.ResultApplied
	}
	if err := audit.NewRecorder(c, origin, audit.WithMaxItems(2)).RecordApply(ctx, applied(repair.OutcomeApplied, nil, results...)); err != nil {
		t.Fatal(err)
	}
	got, err := audit.List(ctx, c, audit.ListOptions{})
	if err != nil || len(got) != 1 {
		t.Fatal(got, err)
	}
	if e := got[0]; len(e.Items) != 2 || e.ItemsOmitted != 3 || e.Summary != "5 applied" {
		t.Fatalf("items %d omitted %d summary %q", len(e.Items), e.ItemsOmitted, e.Summary)
	}
}

// TestRedactArgs: no password survives in a recorded command line, in any
// spelling an operator might use; everything else is kept.
func TestRedactArgs(t *testing.T) {
	const pw = "s3cr3t-pw"
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"redis flag", []string{"protctl", "--redis", "redis://op:" + pw + "@10.0.0.1:6379/0", "partitions", "reap", "c", "k"},
			"protctl --redis redis://op:xxxxx@10.0.0.1:6379/0 partitions reap c k"},
		{"redis flag with =", []string{"protctl", "--redis=rediss://:" + pw + "@h:6380"}, "protctl --redis=rediss://:xxxxx@h:6380"},
		{"password-only user info", []string{"protctl", "--redis", "redis://:" + pw + "@h"}, "protctl --redis redis://:xxxxx@h"},
		{"no password", []string{"protctl", "--redis", "redis://h:6379/0"}, "protctl --redis redis://h:6379/0"},
		{"query parameter", []string{"protctl", "--redis", "redis://h/0?password=" + pw + "&db=1"}, "protctl --redis 'redis://h/0?db=1&password=xxxxx'"},
		{"password flag", []string{"protctl", "--redis-password", pw, "x"}, "protctl --redis-password xxxxx x"},
		{"password flag with =", []string{"protctl", "--redis-password=" + pw}, "protctl --redis-password=xxxxx"},
		{"token flag", []string{"protctl", "--admin-token", pw}, "protctl --admin-token xxxxx"},
		{"password file is a path", []string{"protctl", "--redis-password-file", "/run/secrets/pw"}, "protctl --redis-password-file /run/secrets/pw"},
		{"url inside a reason", []string{"protctl", "parked", "skip", "s", "a", "--reason", "down: redis://u:" + pw + "@h"}, "protctl parked skip s a --reason 'down: redis://u:xxxxx@h'"},
		{"unparsable url", []string{"protctl", "--redis", "redis://u:" + pw + "@h:port"}, "protctl --redis '<unparsable URL>'"},
		{"quoting", []string{"protctl", "parked", "skip", "s", "a", "--reason", "it's bad"}, `protctl parked skip s a --reason 'it'\''s bad'`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := audit.CommandLine(audit.RedactArgs(c.args))
			if got != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
			if strings.Contains(got, pw) {
				t.Fatalf("the password survived: %s", got)
			}
		})
	}
}

// TestEntryJSONIsLowerCamelCase: the stored document's field names are
// API.
func TestEntryJSONIsLowerCamelCase(t *testing.T) {
	b, err := json.Marshal(audit.Entry{})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	for _, k := range []string{"time", "startedAt", "user", "host", "context", "commandLine", "version", "layout", "actions", "outcome", "exitCode", "summary", "planCreatedAt", "items"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %q in %s", k, b)
		}
	}
}

// TestEntryReasonLosesAURLPassword: a --reason quoting a URL with a
// password is recorded without it, and the caller's plan is untouched.
func TestEntryReasonLosesAURLPassword(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	a := applied(repair.OutcomeApplied, nil, repair.ResultApplied)
	reason := "poison; see redis://u:hunter2@10.0.0.1:6379"
	a.Plan.Items[0].Params.Reason = reason
	if err := audit.NewRecorder(c, origin).RecordApply(ctx, a); err != nil {
		t.Fatal(err)
	}
	if a.Plan.Items[0].Params.Reason != reason {
		t.Fatal("the recorder changed the caller's plan")
	}
	got, err := audit.List(ctx, c, audit.ListOptions{})
	if err != nil || len(got) != 1 {
		t.Fatal(got, err)
	}
	if r := got[0].Items[0].Params.Reason; r != "poison; see redis://u:xxxxx@10.0.0.1:6379" {
		t.Fatalf("reason %q", r)
	}
}
