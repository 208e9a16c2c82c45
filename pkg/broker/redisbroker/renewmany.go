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
