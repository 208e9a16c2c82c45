package testenv

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// StartReplica starts a plain (non-TLS, no password) replica of primary
// for t, waits until its link to the primary is up, and stops it at
// cleanup. Pause it (SIGSTOP) to make WAIT on the primary time out.
func StartReplica(t testing.TB, primary *Redis) *Redis {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sentinelReadyTimeout)
	defer cancel()
	// The primary's default waits 5s for more replicas before a
	// diskless sync.
	if err := primary.Client(t).ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatalf("testenv: primary %s: %v", primary.Addr, err)
	}
	r := StartRedis(t, WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(primary.Port)))
	for {
		err := replicaSynced(ctx, r)
		if err == nil {
			return r
		}
		select {
		case <-ctx.Done():
			t.Fatalf("testenv: replica %s of %s: %v", r.Addr, primary.Addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
