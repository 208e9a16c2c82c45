package main

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/output"
)

// interruptOnWrite stands for Ctrl-C pressed while a watch shows its
// first round: its first write cancels the command's context
// as the signal handler does (cause clierr.ErrInterrupted).
type interruptOnWrite struct {
	w      io.Writer
	once   sync.Once
	cancel context.CancelCauseFunc
}

func (i *interruptOnWrite) Write(p []byte) (int, error) {
	i.once.Do(func() { i.cancel(clierr.ErrInterrupted) })
	return i.w.Write(p)
}

// TestWatchOnEveryListCommand: -w exists on every list command through
// one mechanism, and Ctrl-C ends a watch quietly: exit 0, the round
// printed, nothing on stderr (issue 18 item 11).
func TestWatchOnEveryListCommand(t *testing.T) {
	e := newOpsEnv(t)
	e.heartbeat()
	for _, args := range [][]string{
		{"partitions", "ls", e.s.Orders},
		{"leases", "ls", "--category", e.s.Orders},
		{"parked", "ls"},
		{"nodes", "ls", "--service", "shop"},
		{"nodes", "ls"},
		{"topics", "ls"},
		{"check"}, // fails (an expired lease): the watch goes on
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			cl := e.cli(false)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			// A safety net, not an assertion: a command that wrote nothing
			// would otherwise wait out its hour (stdout is checked below).
			stop := time.AfterFunc(time.Minute, func() { cancel(clierr.ErrInterrupted) })
			defer stop.Stop()
			cl.ctx = ctx
			// An empty list's message goes to stderr: either stream's
			// first write is the first round shown.
			iw := &interruptOnWrite{cancel: cancel}
			cl.configure = func(s *output.IOStreams) {
				iw.w = s.Out
				s.Out = iw
				s.ErrOut = &interruptOnWrite{w: s.ErrOut, cancel: cancel}
			}
			r := cl.run(append(args, "-w", "--watch-interval", "1h")...)
			r.wantCode(t, 0)
			if strings.TrimSpace(r.stdout+r.stderr) == "" || strings.Contains(r.stderr, "protctl:") {
				t.Errorf("stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			}
		})
	}
	r := e.run("leases", "ls", "-w", "--watch-interval", "0s")
	r.wantCode(t, 2)
}

// TestServicesListedWithoutService: nodes ls and topics ls without
// --service list the services found in Redis (status records and lease
// groups) instead of failing on a missing flag (issue 18 item 11).
func TestServicesListedWithoutService(t *testing.T) {
	e := newOpsEnv(t)
	e.heartbeat()
	// A Kafka lease group of another service.
	if err := e.c.Set(context.Background(), "protctl:{billing|topic:payments}:generation:0", "2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"nodes", "ls"}, {"topics", "ls"}} {
		r := e.run(append(cmd, "-o", "json")...)
		r.wantCode(t, 0)
		var list struct {
			Kind  string `json:"kind"`
			Items []struct {
				Name   string   `json:"name"`
				Nodes  bool     `json:"nodes"`
				Topics []string `json:"topics"`
			} `json:"items"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
			t.Fatal(err)
		}
		if list.Kind != "ServiceList" || len(list.Items) != 2 ||
			list.Items[0].Name != "billing" || list.Items[0].Nodes || strings.Join(list.Items[0].Topics, ",") != "payments" ||
			list.Items[1].Name != "shop" || !list.Items[1].Nodes {
			t.Errorf("%v: %s", cmd, r.stdout)
		}
		r = e.run(cmd...)
		r.wantCode(t, 0)
		if !strings.Contains(r.stderr, "--service S") || !strings.Contains(r.stdout, "shop") {
			t.Errorf("%v table:\n%s\nstderr:\n%s", cmd, r.stdout, r.stderr)
		}
	}
}
