package redisbroker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

// Replica acknowledgements. Redis replicates asynchronously: a primary
// that dies may take its last writes with it, and Sentinel (or a managed
// service) promotes a replica that never saw them. WAIT n timeout, sent on
// the connection that made a write, blocks until n replicas have
// acknowledged every write of that connection so far, or the timeout
// passes, and says how many did. WAIT cannot run inside a script, so the
// write and the WAIT go on one connection taken from the pool
// (Client.Conn; on a Cluster, of the master of the write's key), the
// WAIT right after the write.
//
// docs/decisions/0039-redis-failover-fencing.md says what each one buys: with
// lease acknowledgements a promoted replica never hands out a generation
// an owner already used, nor expires a lease before its owner stops
// trusting it; with publish acknowledgements an acknowledged entry
// survives a failover.

// Replicas is a write's durability requirement: the call returns only
// once N replicas acknowledged it (WAIT N), or fails with a
// *broker.NotReplicatedError after Timeout. The zero value asks for none.
type Replicas struct {
	// N is how many replicas must acknowledge the write. 0: none (no
	// WAIT is sent).
	N int
	// Timeout bounds the wait. Default (0): 1s. WAIT's resolution is the
	// millisecond; a timeout below 1ms is 1ms (WAIT 0 would wait forever).
	Timeout time.Duration
}

// DefaultReplicaTimeout is the Timeout of a Replicas whose Timeout is 0.
const DefaultReplicaTimeout = time.Second

func (r Replicas) on() bool { return r.N > 0 }

func (r Replicas) withDefaults() Replicas {
	if r.N < 0 {
		r.N = 0
	}
	if r.Timeout <= 0 {
		r.Timeout = DefaultReplicaTimeout
	}
	if r.Timeout < time.Millisecond {
		r.Timeout = time.Millisecond
	}
	return r
}

// WithLeaseReplicas makes every lease acquisition and renewal wait for
// r.N replicas (AcquirePartitionLease, AcquirePartitionLeases, the pinned
// reader's acquisitions, RenewPartitionLease, RenewPartitionLeases). An
// acquisition the replicas did not acknowledge is released again and
// fails with a *broker.NotReplicatedError (acquired false): a replica
// promoted meanwhile may not know its generation, and could hand the same
// generation to another owner. A renewal they did not acknowledge fails
// the same way: the caller learns nothing, and must not extend its trust
// in the lease (a promoted replica may expire it at the previous
// renewal's deadline). Default: none.
//
// It needs a *redis.Client (a single server or a Sentinel-watched
// primary) or a *redis.ClusterClient; with any other client every lease
// call fails.
func WithLeaseReplicas(r Replicas) Option {
	return func(c *config) { c.leaseReplicas = r.withDefaults() }
}

// WithPublishReplicas makes PublishPartitioned and Append wait for r.N
// replicas after the entry is written (in the cluster layout, after the
// append and again after the index is recorded). A publish they did not
// acknowledge fails with a *broker.NotReplicatedError carrying the entry
// id: the entry is on the primary and may be lost in a failover; a
// publisher that sends it again may duplicate it. Default: none. Client
// types as WithLeaseReplicas.
func WithPublishReplicas(r Replicas) Option {
	return func(c *config) { c.publishReplicas = r.withDefaults() }
}

// ReplicaWait is one WAIT as the hook of WithReplicaHook sees it.
type ReplicaWait struct {
	// Op is the call that waited: "acquire lease", "renew lease",
	// "publish" or "append".
	Op string
	// Want is the replicas asked for, Acked those that acknowledged
	// within the timeout (Acked < Want: the call failed with
	// broker.ErrNotReplicated).
	Want, Acked int
	// Elapsed is the WAIT's round trip.
	Elapsed time.Duration
	// Err is a failure of the WAIT itself (a transport error): nothing
	// is known about the replicas.
	Err error
}

// WithReplicaHook calls f after every WAIT the Broker sends, for metrics
// (protctl run node counts them in protctl_replica_waits_total and
// protctl_replica_wait_duration_seconds). f must be fast and safe for
// concurrent use. Default: none.
func WithReplicaHook(f func(ReplicaWait)) Option { return func(c *config) { c.replicaHook = f } }

// errReplicaClient is the failure of a call that must wait for replicas
// on a client that cannot tell which connection made a write.
var errReplicaClient = errors.New("redisbroker: replica acknowledgements need a single-server, Sentinel or Cluster client")

// waitFor is a WAIT to send after a write: r and what to call the write.
type waitFor struct {
	r  Replicas
	op string
}

// waitSpec is the WAIT the calls of op need under r, nil when r asks for
// none.
func waitSpec(op string, r Replicas) *waitFor {
	if !r.on() {
		return nil
	}
	return &waitFor{r: r, op: op}
}

// masterConn is a connection, out of the pool until closed, of the server
// that holds key: the client's own for a single server (or the primary a
// Sentinel names), the key's master on a Cluster.
func (b *Broker) masterConn(ctx context.Context, key string) (*redis.Conn, error) {
	switch c := b.client.(type) {
	case *redis.Client:
		return c.Conn(), nil
	case *redis.ClusterClient:
		m, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		return m.Conn(), nil
	}
	return nil, errReplicaClient
}

// wait sends WAIT on conn, which just made a write, and returns how many
// replicas acknowledged it; err is a failure of the WAIT itself (mapped).
// It reports to the hook.
func (b *Broker) wait(ctx context.Context, conn *redis.Conn, w *waitFor) (int, error) {
	start := time.Now()
	n, err := conn.Wait(ctx, w.r.N, w.r.Timeout).Result()
	if h := b.cfg.replicaHook; h != nil {
		h(ReplicaWait{Op: w.op, Want: w.r.N, Acked: int(n), Elapsed: time.Since(start), Err: err})
	}
	if err != nil {
		return 0, mapErr(call{Op: w.op}, err)
	}
	return int(n), nil
}

// notReplicated is the error of a write w that only acked replicas
// acknowledged, nil when enough did.
func (w *waitFor) notReplicated(key, id string, acked int) error {
	if acked >= w.r.N {
		return nil
	}
	return &broker.NotReplicatedError{Op: w.op, Key: key, ID: id, Want: w.r.N, Acked: acked, Timeout: w.r.Timeout}
}

// releaseUnreplicated gives back leases an acquisition took that the
// replicas did not acknowledge, so that they do not wait for their TTL:
// best effort, bounded by the replica timeout, on a context that outlives
// the caller's (a release after the caller gave up is still right). A
// release that fails leaves the lease to expire.
func (b *Broker) releaseUnreplicated(ctx context.Context, fences []broker.Fence, timeout time.Duration) {
	if len(fences) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	calls := make([]scriptCall, len(fences))
	for i, f := range fences {
		calls[i] = scriptCall{keys: []string{f.LeaseKey}, args: []any{f.Token}}
	}
	b.runScripts(rctx, releaseScript, calls, nil)
}

// appendReplicated is Append on one connection followed by WAIT (publish replicas
// on).
func (b *Broker) appendReplicated(ctx context.Context, stream string, data []byte, w *waitFor) (string, error) {
	const op = "append"
	conn, err := b.masterConn(ctx, stream)
	if err != nil {
		return "", mapErr(call{Op: op, Key: stream}, err)
	}
	defer conn.Close()
	id, err := conn.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: "*", Values: []any{broker.DataField, data}}).Result()
	if err != nil {
		return "", mapErr(call{Op: op, Key: stream, Want: "stream"}, err)
	}
	n, err := b.wait(ctx, conn, w)
	if err != nil {
		return "", fmt.Errorf("%w (entry %s was written to %s; whether the replicas have it is unknown)", err, id, stream)
	}
	if err := w.notReplicated(stream, id, n); err != nil {
		return "", err
	}
	return id, nil
}

// failure is the error of a lease write the WAIT r answered for: nil when
// enough replicas acknowledged it.
func (r waitResult) failure(w *waitFor, key string) error {
	if r.err != nil {
		return r.err
	}
	return w.notReplicated(key, "", r.acked)
}
