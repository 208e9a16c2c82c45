package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
)

// seekCLI is a CLI on a fresh redis-server with partition o-1 of
// shop::order: entries 1-0 .. 6-0, all handled by group g, no lease.
func seekCLI(t *testing.T) (*cli, *redis.Client) {
	t.Helper()
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	ctx := t.Context()
	l := broker.ProteanLayout
	stream := l.Stream("shop::order", "o-1")
	for i := 1; i <= 6; i++ {
		c.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: fmt.Sprintf("%d-0", i), Values: []string{"data", "{}"}})
	}
	c.SAdd(ctx, l.IndexKey("shop::order"), "o-1")
	c.XGroupCreate(ctx, stream, "g", "6-0")
	c.Set(ctx, l.GenerationKey("g", "o-1"), "1", 0)
	cl := newCLI(t)
	cl.env["PROTCTL_REDIS"] = srv.URL()
	return cl, c
}

func seekPosition(t *testing.T, c *redis.Client) string {
	t.Helper()
	for _, g := range c.XInfoGroups(t.Context(), "shop::order:o-1").Val() {
		if g.Name == "g" {
			return g.LastDeliveredID
		}
	}
	return ""
}

func TestSeekCLIExitCodes(t *testing.T) {
	cl, c := seekCLI(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"unknown group", []string{"--group", "nobody", "--to", "earliest"}, 4, `group "nobody" reads none`},
		{"malformed --to", []string{"--group", "g", "--to", "yesterday"}, 2, "--to"},
		{"--to in the future", []string{"--group", "g", "--to", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, 2, "in the future"},
		// A stream id after the server's clock is in the future too.
		{"--to id in the future", []string{"--group", "g", "--to", "9999999999999-0"}, 2, "invalid --to"},
		{"--to and --shift", []string{"--group", "g", "--to", "earliest", "--shift", "-1"}, 2, "exactly one of --to and --shift"},
		{"bad --lane", []string{"--group", "g", "--to", "earliest", "--lane", "side"}, 2, "--lane"},
		{"unknown key", []string{"o-9", "--group", "g", "--to", "earliest"}, 4, `partition "o-9"`},
		{"id after the newest", []string{"--group", "g", "--to", "99-0"}, 6, "after the newest id"},
		{"no terminal, no --yes", []string{"--group", "g", "--to", "earliest"}, 6, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cl.run(append([]string{"partitions", "seek", "shop::order"}, tc.args...)...)
			r.wantCode(t, tc.code)
			if !strings.Contains(r.stderr+r.stdout, tc.err) {
				t.Errorf("output lacks %q:\n%s\n%s", tc.err, r.stdout, r.stderr)
			}
			if got := seekPosition(t, c); got != "6-0" {
				t.Fatalf("the group moved to %s", got)
			}
		})
	}
	c.Set(t.Context(), "shop::order:o-2", "not a stream", 0)
	c.SAdd(t.Context(), "shop::order:__partitions__", "o-2")
	cl.run("partitions", "seek", "shop::order", "o-2", "--group", "g", "--to", "earliest", "--dry-run").wantCode(t, 9)
}

func TestSeekCLIStalePlanExits5(t *testing.T) {
	cl, c := seekCLI(t)
	dir := t.TempDir()
	r := cl.run("partitions", "seek", "shop::order", "--group", "g", "--shift", "-3", "--dry-run", "-o", "json")
	r.wantCode(t, 0)
	writeFile(t, dir+"/seek.json", r.stdout)
	c.Set(t.Context(), "g:o-1:__lease__", "node-2:2", time.Minute)
	c.Set(t.Context(), "g:o-1:__generation__", "2", 0)
	r = cl.run("apply", "-f", dir+"/seek.json", "--yes")
	r.wantCode(t, 5)
	if !strings.Contains(r.stdout, "a lease appeared since the plan") {
		t.Errorf("apply output does not say why:\n%s", r.stdout)
	}
	if got := seekPosition(t, c); got != "6-0" {
		t.Fatalf("a stale plan moved the group to %s", got)
	}
	c.Del(t.Context(), "g:o-1:__lease__")
	c.Set(t.Context(), "g:o-1:__generation__", "1", 0)
	cl.run("apply", "-f", dir+"/seek.json", "--yes").wantCode(t, 0)
	if got := seekPosition(t, c); got != "3-0" {
		t.Fatalf("after the apply the group is at %s, want 3-0", got)
	}
}

// TestSeekCLIToATimeBeforeTheFirstEntry: a time before the stream's first
// entry replays it all when nothing was trimmed; when entries were
// trimmed the replay could not start at the time, and the seek is refused
// (exit 6, saying so and how to replay what is left), changing nothing.
func TestSeekCLIToATimeBeforeTheFirstEntry(t *testing.T) {
	cl, c := seekCLI(t)
	// Entries 1-0 .. 6-0 are at 1 .. 6 ms after the epoch.
	before := time.UnixMilli(0).UTC().Format(time.RFC3339Nano)
	r := cl.run("partitions", "seek", "shop::order", "--group", "g", "--to", before, "--dry-run", "-o", "json")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, `"rehandle": 6`) && !strings.Contains(r.stdout, `"rehandle":6`) {
		t.Errorf("a time before the first entry does not replay all 6:\n%s", r.stdout)
	}
	if err := c.XTrimMaxLen(t.Context(), "shop::order:o-1", 3).Err(); err != nil {
		t.Fatal(err)
	}
	r = cl.run("partitions", "seek", "shop::order", "--group", "g", "--to", time.UnixMilli(2).UTC().Format(time.RFC3339Nano), "--yes")
	r.wantCode(t, 6)
	if !strings.Contains(r.stdout+r.stderr, "were trimmed or deleted") || !strings.Contains(r.stdout+r.stderr, "--to earliest") {
		t.Errorf("the refusal does not say why and what to do:\n%s\n%s", r.stdout, r.stderr)
	}
	if got := seekPosition(t, c); got != "6-0" {
		t.Fatalf("the group moved to %s", got)
	}
}
