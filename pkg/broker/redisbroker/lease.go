package redisbroker

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

// AcquirePartitionLease takes leaseKey if it is free, in one script: it
// increments generationKey and sets leaseKey to owner:generation with a PX
// TTL. A held lease (by anyone, owner included) is not an error: it
// returns acquired=false. Because the counter is only ever incremented,
// the new generation is greater than every earlier one, across expiry,
// release and reap; across a failover only with WithLeaseReplicas, which
// hands the lease out only once the replicas hold it.
func (b *Broker) AcquirePartitionLease(ctx context.Context, leaseKey, generationKey, owner string, ttl time.Duration) (broker.Lease, bool, error) {
	const op = "acquire lease"
	ms, err := acquireArgs(op, leaseKey, generationKey, owner, ttl)
	if err != nil {
		return broker.Lease{}, false, err
	}
	keys := []string{leaseKey, generationKey}
	if w := waitSpec(op, b.cfg.leaseReplicas); w != nil {
		return b.acquireReplicated(ctx, keys, owner, ms, w)
	}
	g, err := acquireScript.Run(ctx, b.client, keys, owner, ms).Int64()
	if err != nil {
		return broker.Lease{}, false, mapErr(call{Op: op, Keys: keys}, err)
	}
	return newLease(leaseKey, owner, g)
}

// LeaseAt is what AcquirePartitionLeaseAt found: the lease it took, or
// why it took none.
type LeaseAt struct {
	// Lease is the lease taken; its zero value when Acquired is false.
	Lease    broker.Lease
	Acquired bool
	// Held is the lease's value when it was held ("" otherwise).
	Held string
	// Moved says the generation counter was not the one asked for; Now
	// is its value then (nil: none).
	Moved bool
	Now   *int64
}

// AcquirePartitionLeaseAt is AcquirePartitionLease only while the lease
// is free and the generation counter is still generation (nil: never
// leased, no counter), checked, incremented and set in one script
// (acquireat.lua). A lease held, or a counter that moved, is not an
// error: nothing is written, not even the counter, and the result says
// which. It is how an operator takes a short lease on a partition a plan
// saw free: a partition leased since (and maybe released again) is a
// conflict that leaves no trace.
func (b *Broker) AcquirePartitionLeaseAt(ctx context.Context, leaseKey, generationKey, owner string, ttl time.Duration, generation *int64) (LeaseAt, error) {
	const op = "acquire lease"
	ms, err := acquireArgs(op, leaseKey, generationKey, owner, ttl)
	if err != nil {
		return LeaseAt{}, err
	}
	seen := ""
	if generation != nil {
		seen = strconv.FormatInt(*generation, 10)
	}
	keys := []string{leaseKey, generationKey}
	args := []any{owner, ms, seen}
	w := waitSpec(op, b.cfg.leaseReplicas)
	var cmd *redis.Cmd
	var wait waitResult
	if w != nil {
		cmds, waits := b.runScripts(ctx, acquireAtScript, []scriptCall{{keys: keys, args: args}}, w)
		cmd, wait = cmds[0], waits[0]
	} else {
		cmd = acquireAtScript.Run(ctx, b.client, keys, args...)
	}
	v, err := cmd.Slice()
	if err != nil {
		return LeaseAt{}, mapErr(call{Op: op, Keys: keys}, err)
	}
	if len(v) != 2 {
		return LeaseAt{}, fmt.Errorf("redisbroker: %s: unexpected reply %v", op, v)
	}
	status, _ := v[0].(string)
	switch status {
	case "acquired":
		g, ok := v[1].(int64)
		if !ok {
			return LeaseAt{}, fmt.Errorf("redisbroker: %s: unexpected reply %v", op, v)
		}
		lease, _, _ := newLease(leaseKey, owner, g)
		if w != nil {
			if err := wait.failure(w, leaseKey); err != nil {
				b.releaseUnreplicated(ctx, []broker.Fence{lease.Fence}, w.r.Timeout)
				return LeaseAt{}, err
			}
		}
		return LeaseAt{Lease: lease, Acquired: true}, nil
	case "leased":
		held, _ := v[1].(string)
		return LeaseAt{Held: held}, nil
	case "moved":
		out := LeaseAt{Moved: true}
		if s, _ := v[1].(string); s != "" {
			if g, err := strconv.ParseInt(s, 10, 64); err == nil {
				out.Now = &g
			}
		}
		return out, nil
	}
	return LeaseAt{}, fmt.Errorf("redisbroker: %s: unexpected reply %v", op, v)
}

// acquireReplicated is AcquirePartitionLease with lease replicas: the
// script and WAIT on one connection; a lease the replicas did not
// acknowledge is released and the call fails.
func (b *Broker) acquireReplicated(ctx context.Context, keys []string, owner string, ms int64, w *waitFor) (broker.Lease, bool, error) {
	cmds, waits := b.runScripts(ctx, acquireScript, []scriptCall{{keys: keys, args: []any{owner, ms}}}, w)
	g, err := cmds[0].Int64()
	if err != nil {
		return broker.Lease{}, false, mapErr(call{Op: w.op, Keys: keys}, err)
	}
	lease, ok, _ := newLease(keys[0], owner, g)
	if !ok {
		return broker.Lease{}, false, nil
	}
	if err := waits[0].failure(w, keys[0]); err != nil {
		b.releaseUnreplicated(ctx, []broker.Fence{lease.Fence}, w.r.Timeout)
		return broker.Lease{}, false, err
	}
	return lease, true, nil
}

// acquireArgs validates AcquirePartitionLease's arguments and returns the
// TTL in milliseconds.
func acquireArgs(op, leaseKey, generationKey, owner string, ttl time.Duration) (int64, error) {
	if err := nonEmpty(op, "lease key", leaseKey); err != nil {
		return 0, err
	}
	if err := nonEmpty(op, "generation key", generationKey); err != nil {
		return 0, err
	}
	if err := nonEmpty(op, "owner", owner); err != nil {
		return 0, err
	}
	return ttlMillis(op, ttl)
}

// newLease is the result of acquire.lua's reply g: the new generation,
// or 0 when the lease is held.
func newLease(leaseKey, owner string, g int64) (broker.Lease, bool, error) {
	if g == 0 {
		return broker.Lease{}, false, nil
	}
	return broker.Lease{
		Fence:      broker.Fence{LeaseKey: leaseKey, Token: broker.FenceToken(owner, g)},
		Owner:      owner,
		Generation: g,
	}, true, nil
}

// RenewPartitionLease resets the lease's TTL if it holds exactly f.Token
// (compare and PEXPIRE in one script). false means the caller has lost
// the partition and must stop. With WithLeaseReplicas a renewal the
// replicas did not acknowledge fails with a *broker.NotReplicatedError.
func (b *Broker) RenewPartitionLease(ctx context.Context, f broker.Fence, ttl time.Duration) (bool, error) {
	const op = "renew lease"
	if err := validFence(op, f); err != nil {
		return false, err
	}
	ms, err := ttlMillis(op, ttl)
	if err != nil {
		return false, err
	}
	keys := []string{f.LeaseKey}
	if w := waitSpec(op, b.cfg.leaseReplicas); w != nil {
		oks, err := b.renewReplicated(ctx, []broker.Fence{f}, ms, w)
		if err != nil {
			return false, err
		}
		return oks[0], nil
	}
	n, err := renewScript.Run(ctx, b.client, keys, f.Token, ms).Int64()
	if err != nil {
		return false, mapErr(call{Op: op, Keys: keys}, err)
	}
	return n == 1, nil
}

// ReleasePartitionLease deletes the lease if it holds exactly f.Token
// (compare and DEL in one script), so that another owner can take the
// partition at once instead of after the TTL. The generation stays.
func (b *Broker) ReleasePartitionLease(ctx context.Context, f broker.Fence) (bool, error) {
	const op = "release lease"
	if err := validFence(op, f); err != nil {
		return false, err
	}
	keys := []string{f.LeaseKey}
	n, err := releaseScript.Run(ctx, b.client, keys, f.Token).Int64()
	if err != nil {
		return false, mapErr(call{Op: op, Keys: keys}, err)
	}
	return n == 1, nil
}

// ReleasePartitionLeaseConsumer is ReleasePartitionLease that also deletes,
// in the same script and only when the lease holds f.Token, every consumer
// of group without pending entries on each of streams (the releasing
// owner's own included), so that a partition released when idle leaves
// no consumer behind (broker.ConsumerReleaser). In the cluster layout the
// partition's lanes share the lease's hash tag, so the script touches one
// slot.
func (b *Broker) ReleasePartitionLeaseConsumer(ctx context.Context, f broker.Fence, group string, streams ...string) (bool, error) {
	const op = "release lease"
	keys, err := b.releaseKeys(op, f, group, streams)
	if err != nil {
		return false, err
	}
	n, err := releaseScript.Run(ctx, b.client, keys, f.Token, group).Int64()
	if err != nil {
		return false, mapErr(call{Op: op, Keys: keys}, err)
	}
	return n == 1, nil
}

// releaseKeys checks ReleasePartitionLeaseConsumer's arguments and
// returns release.lua's keys.
func (b *Broker) releaseKeys(op string, f broker.Fence, group string, streams []string) ([]string, error) {
	if err := validFence(op, f); err != nil {
		return nil, err
	}
	if err := b.cfg.layout.ValidateName(op, "group", group); err != nil {
		return nil, err
	}
	keys := make([]string, 0, 1+len(streams))
	keys = append(keys, f.LeaseKey)
	for _, s := range streams {
		if err := nonEmpty(op, "stream", s); err != nil {
			return nil, err
		}
		keys = append(keys, s)
	}
	return keys, nil
}

// ReleasePartitionLeasesConsumers runs each release as
// ReleasePartitionLeaseConsumer does, in one round trip (release.lua per
// release, pipelined, never sent twice: runScripts), each an atomic step
// under its own lease check (broker.BatchReleaser). A release with
// invalid arguments fails alone, before anything is sent.
func (b *Broker) ReleasePartitionLeasesConsumers(ctx context.Context, rels []broker.LeaseRelease) []broker.ReleaseResult {
	const op = "release lease"
	out := make([]broker.ReleaseResult, len(rels))
	calls := make([]scriptCall, 0, len(rels))
	sent := make([]int, 0, len(rels))
	for i := range rels {
		r := &rels[i]
		keys, err := b.releaseKeys(op, r.Fence, r.Group, r.Streams)
		if err != nil {
			out[i].Err = err
			continue
		}
		calls = append(calls, scriptCall{keys: keys, args: []any{r.Fence.Token, r.Group}})
		sent = append(sent, i)
	}
	if len(calls) == 0 {
		return out
	}
	cmds, _ := b.runScripts(ctx, releaseScript, calls, nil)
	for j, cmd := range cmds {
		i := sent[j]
		n, err := cmd.Int64()
		if err != nil {
			out[i].Err = mapErr(call{Op: op, Keys: calls[j].keys}, err)
			continue
		}
		out[i].Released = n == 1
	}
	return out
}

// ConsumerVerdict is what DeleteEmptyConsumer did.
type ConsumerVerdict string

// The verdicts of DeleteEmptyConsumer.
const (
	// ConsumerDeleted: the consumer was deleted.
	ConsumerDeleted ConsumerVerdict = "deleted"
	// ConsumerGone: no such stream, group or consumer; nothing changed.
	ConsumerGone ConsumerVerdict = "gone"
	// ConsumerHasPending: the consumer holds pending entries (Pending of
	// them); nothing changed.
	ConsumerHasPending ConsumerVerdict = "pending"
	// ConsumerLeased: the consumer is the token of the partition's live
	// lease, its owner's; nothing changed.
	ConsumerLeased ConsumerVerdict = "lease"
)

// ConsumerDeletion is DeleteEmptyConsumer's result.
type ConsumerDeletion struct {
	Verdict ConsumerVerdict
	Pending int64 // with ConsumerHasPending
}

// DeleteEmptyConsumer deletes consumer of group on stream, in one script
// that first checks that the consumer holds no pending entries (XGROUP
// DELCONSUMER would destroy them) and is not the value of leaseKey (the
// group's lease on the partition: its live owner reads as that token).
// It is the operator's repair of consumers left by earlier generations
// or by Protean (protctl partitions prune-consumers); the runtime prunes
// its own in reclaim and release.
func (b *Broker) DeleteEmptyConsumer(ctx context.Context, leaseKey, stream, group, consumer string) (ConsumerDeletion, error) {
	const op = "delete consumer"
	if err := nonEmpty(op, "lease key", leaseKey); err != nil {
		return ConsumerDeletion{}, err
	}
	if err := nonEmpty(op, "stream", stream); err != nil {
		return ConsumerDeletion{}, err
	}
	if err := b.cfg.layout.ValidateName(op, "group", group); err != nil {
		return ConsumerDeletion{}, err
	}
	if err := nonEmpty(op, "consumer", consumer); err != nil {
		return ConsumerDeletion{}, err
	}
	keys := []string{leaseKey, stream}
	res, err := delConsumerScript.Run(ctx, b.client, keys, group, consumer).Slice()
	if err != nil {
		return ConsumerDeletion{}, mapErr(call{Op: op, Keys: keys, Stream: stream}, err)
	}
	if len(res) != 2 {
		return ConsumerDeletion{}, fmt.Errorf("redisbroker: %s: unexpected reply %v", op, res)
	}
	v, _ := res[0].(string)
	n, _ := res[1].(int64)
	switch d := (ConsumerDeletion{Verdict: ConsumerVerdict(v), Pending: n}); d.Verdict {
	case ConsumerDeleted, ConsumerGone, ConsumerHasPending, ConsumerLeased:
		return d, nil
	}
	return ConsumerDeletion{}, fmt.Errorf("redisbroker: %s: unexpected verdict %q", op, v)
}
