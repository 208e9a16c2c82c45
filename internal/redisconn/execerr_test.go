package redisconn_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/redisconn"
	"github.com/protctl/protctl/internal/testenv"
)

// A pipeline on a connection whose login the server refuses fails as a
// whole, with nil errors on its commands: ExecErr returns that failure.
// A pipeline whose commands carry their own errors (an error reply, a
// transport failure) is left to them.
func TestExecErrReportsARefusedLogin(t *testing.T) {
	r := testenv.StartRedis(t, testenv.WithPassword("right"))
	ctx := context.Background()

	wrong := redis.NewClient(&redis.Options{Addr: r.Addr, Password: "wrong", MaxRetries: -1})
	defer wrong.Close()
	p := wrong.Pipeline()
	info := p.XInfoGroups(ctx, "s")
	cmds, err := p.Exec(ctx)
	if err == nil || info.Err() != nil {
		t.Fatalf("go-redis changed: Exec err %v, command err %v (the helper exists for a nil command error)", err, info.Err())
	}
	if got := redisconn.ExecErr(cmds, err); got == nil || !strings.Contains(got.Error(), "WRONGPASS") {
		t.Fatalf("ExecErr = %v, want the refused login", got)
	}

	right := redis.NewClient(&redis.Options{Addr: r.Addr, Password: "right"})
	defer right.Close()
	p = right.Pipeline()
	p.Set(ctx, "str", "x", 0)
	missing := p.XInfoGroups(ctx, "missing")
	cmds, err = p.Exec(ctx)
	if err == nil || missing.Err() == nil {
		t.Fatalf("Exec err %v, command err %v: want both", err, missing.Err())
	}
	if got := redisconn.ExecErr(cmds, err); got != nil {
		t.Fatalf("ExecErr = %v, want nil: the command carries its error", got)
	}
	if got := redisconn.ExecErr(nil, nil); got != nil {
		t.Fatal(got)
	}
}
