package redisbroker

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

// RenewPartitionLeases renews each lease as RenewPartitionLease does (the
// same renew.lua, compare and PEXPIRE) and reports, per fence, whether it
// still held its lease. All renewals go in one pipeline: a node renews
// every lease it holds in one round trip per renewal period
// (pkg/runtime's BatchRenewer). Each renewal is its own atomic script, so
// the pipeline also works across Redis Cluster slots. Bad input fails the
// call before any I/O; an error means nothing is known about any lease.
func (b *Broker) RenewPartitionLeases(ctx context.Context, fences []broker.Fence, ttl time.Duration) ([]bool, error) {
	const op = "renew leases"
	for _, f := range fences {
		if err := validFence(op, f); err != nil {
			return nil, err
		}
	}
	ms, err := ttlMillis(op, ttl)
	if err != nil {
		return nil, err
	}
	if len(fences) == 0 {
		return nil, nil
	}
	if w := waitSpec("renew lease", b.cfg.leaseReplicas); w != nil {
		return b.renewReplicated(ctx, fences, ms, w)
	}
	run := func() ([]*redis.Cmd, error) {
		cmds := make([]*redis.Cmd, len(fences))
		_, err := b.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, f := range fences {
				cmds[i] = renewScript.EvalSha(ctx, p, []string{f.LeaseKey}, f.Token, ms)
			}
			return nil
		})
		return cmds, err
	}
	cmds, err := run()
	if err != nil && isNoScript(cmds) {
		// The server lost its script cache (a restart, SCRIPT FLUSH):
		// load once and run the whole batch again.
		if lerr := renewScript.Load(ctx, b.client).Err(); lerr != nil {
			return nil, mapErr(call{Op: op}, lerr)
		}
		cmds, err = run()
	}
	oks := make([]bool, len(fences))
	for i, c := range cmds {
		n, cerr := c.Int64()
		if cerr != nil {
			return nil, mapErr(call{Op: op, Keys: []string{fences[i].LeaseKey}}, cerr)
		}
		oks[i] = n == 1
	}
	if err != nil {
		return nil, mapErr(call{Op: op}, err)
	}
	return oks, nil
}

func isNoScript(cmds []*redis.Cmd) bool {
	for _, c := range cmds {
		if c != nil && c.Err() != nil && strings.HasPrefix(c.Err().Error(), "NOSCRIPT") {
			return true
		}
	}
	return false
}

// renewReplicated renews fences with lease replicas: the scripts and WAIT
// on one connection per master (runScripts). Any renewal the replicas did
// not acknowledge fails the call, as any error does: nothing is known.
func (b *Broker) renewReplicated(ctx context.Context, fences []broker.Fence, ms int64, w *waitFor) ([]bool, error) {
	calls := make([]scriptCall, len(fences))
	for i, f := range fences {
		calls[i] = scriptCall{keys: []string{f.LeaseKey}, args: []any{f.Token, ms}}
	}
	cmds, waits := b.runScripts(ctx, renewScript, calls, w)
	oks := make([]bool, len(fences))
	for i, c := range cmds {
		n, err := c.Int64()
		if err != nil {
			return nil, mapErr(call{Op: w.op, Keys: calls[i].keys}, err)
		}
		if err := waits[i].failure(w, fences[i].LeaseKey); err != nil {
			return nil, err
		}
		oks[i] = n == 1
	}
	return oks, nil
}
