package redisbroker

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

// The batch calls run many partitions' fenced steps in one round trip:
// one pipeline of scripts, each an atomic step with its own lease check
// (ackread.lua, acquireread.lua). A pipeline is not a transaction, and
// need not be: what each script proves and changes is its own
// partition's, as if it had been sent alone. On a Cluster the calls go
// to their masters at once, a round trip per master.
//
// A batch of 16 fenced reads or more on a single server runs as one
// optimistic transaction of all its partitions instead (batchtx.go, at
// most 64 partitions a transaction): one WATCH and
// MGET of every lease, then one MULTI ... EXEC, which costs the server a
// third of what the scripts do. docs/decisions/0035-live-reads.md,
// docs/decisions/0023-fenced-read-transactions.md ("Batches").

// scriptCall is one script call of a pipeline.
type scriptCall struct {
	keys []string
	args []any
}

// runScripts sends calls of s in one pipeline (EVALSHA), and those the
// server refused with NOSCRIPT (it lost its scripts) once more with the
// script's body, and returns each call's command. A refused EVALSHA ran
// nothing, so the resend cannot apply a step twice.
//
// A call whose reply was not read must never be sent again: it may have
// run, and an ack-and-read that ran twice delivers the batch after the
// one it lost first. go-redis resends a pipeline that failed that way
// (MaxRetries), so the pipeline runs on one connection taken from the
// pool (Client.Conn), whose sticky pool refuses to hand out another once
// it failed: the calls fail instead (TestBatchReplyLostIsNotResent). On a
// Cluster the calls go on one such connection per master; a Ring, or any
// other client, runs each call on its own, as the Broker's single calls
// do.
//
// With w, each connection then sends WAIT (replicas.go), and waits holds
// per call what its connection's WAIT answered; a client that has no
// such connection (a Ring) runs nothing and fails every call.
func (b *Broker) runScripts(ctx context.Context, s *redis.Script, calls []scriptCall, w *waitFor) (cmds []*redis.Cmd, waits []waitResult) {
	cmds = make([]*redis.Cmd, len(calls))
	if w != nil {
		waits = make([]waitResult, len(calls))
	}
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	switch c := b.client.(type) {
	case *redis.Client:
		b.runScriptsOn(ctx, c, s, calls, all, cmds, w, waits)
	case *redis.ClusterClient:
		masters := map[*redis.Client][]int{}
		for _, i := range all {
			m, err := c.MasterForKey(ctx, calls[i].keys[0])
			if err != nil {
				cmds[i] = redis.NewCmd(ctx)
				cmds[i].SetErr(err)
				continue
			}
			masters[m] = append(masters[m], i)
		}
		var wg sync.WaitGroup
		for m, idx := range masters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b.runScriptsOn(ctx, m, s, calls, idx, cmds, w, waits)
			}()
		}
		wg.Wait()
	default:
		// Another client (a Ring, a wrapper): one call per item, as
		// the unbatched methods send them, with their retry rules.
		for _, i := range all {
			if w != nil {
				cmds[i] = redis.NewCmd(ctx)
				cmds[i].SetErr(errReplicaClient)
				continue
			}
			cmds[i] = s.Run(ctx, b.client, calls[i].keys, calls[i].args...)
		}
	}
	return cmds, waits
}

// waitResult is what the WAIT after a call answered: acked replicas, or
// the WAIT's own failure.
type waitResult struct {
	acked int
	err   error
}

// runScriptsOn runs the calls idx of calls on one connection of c, and
// those refused with NOSCRIPT once more with the script's body on the
// same connection, filling cmds; then, with w, WAIT on that connection,
// filling waits.
//
// Each pipeline starts with a PING: go-redis decides whether to send a
// whole pipeline again from its first reply alone, and a script's error
// that it retries (TRYAGAIN while a Cluster slot migrates, LOADING,
// READONLY or MASTERDOWN around a failover) would otherwise re-run every
// other script of the batch, which did run: a read delivered twice, the
// first batch pending and never returned (TestBatchNotResentAfterARetryableErrorOnItsFirstCall).
// PING fails only when every command would.
func (b *Broker) runScriptsOn(ctx context.Context, c *redis.Client, s *redis.Script, calls []scriptCall, idx []int, cmds []*redis.Cmd, w *waitFor, waits []waitResult) {
	conn := c.Conn()
	defer conn.Close()
	_, _ = conn.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Ping(ctx)
		for _, i := range idx {
			cmds[i] = s.EvalSha(ctx, p, calls[i].keys, calls[i].args...)
		}
		return nil
	})
	var again []int
	for _, i := range idx {
		if err := cmds[i].Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		_, _ = conn.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Ping(ctx)
			for _, i := range again {
				cmds[i] = s.Eval(ctx, p, calls[i].keys, calls[i].args...)
			}
			return nil
		})
	}
	if w == nil {
		return
	}
	// Waiting is pointless when nothing ran: every call failed (on a
	// broken connection WAIT would fail as well).
	ran := false
	for _, i := range idx {
		if cmds[i].Err() == nil {
			ran = true
		}
	}
	if !ran {
		return
	}
	n, err := b.wait(ctx, conn, w)
	for _, i := range idx {
		waits[i] = waitResult{acked: n, err: err}
	}
}

// AckAndReadPartitionsFenced runs each read as AckAndReadPartitionFenced
// does, together: on a single server (Sentinel included), a batch of
// 16 reads or more (WithTxBatchMin) in ReadPending or ReadNew mode as one fenced
// transaction of them all (batchtx.go), two round trips; every other read,
// and each read the transaction leaves to its script, in one pipeline of
// ackread.lua, one round trip. A read with invalid arguments fails alone,
// before anything is sent.
func (b *Broker) AckAndReadPartitionsFenced(ctx context.Context, reads []broker.FencedRead) []broker.ReadResult {
	const op = "ack and read"
	out := make([]broker.ReadResult, len(reads))
	valid := make([]int, 0, len(reads))
	for i := range reads {
		if err := b.validRead(op, &reads[i]); err != nil {
			out[i].Err = err
			continue
		}
		valid = append(valid, i)
	}
	if c, ok := b.client.(*redis.Client); ok && !b.cfg.scriptReads {
		var tx, rest []int
		for _, i := range valid {
			if txReadID(reads[i].Mode) != "" {
				tx = append(tx, i)
			} else {
				rest = append(rest, i)
			}
		}
		if len(tx) >= b.cfg.txBatchMin && b.multiAllowed(ctx, c) {
			valid = append(rest, b.ackAndReadTx(ctx, c, reads, tx, out)...)
		}
	}
	if len(valid) == 0 {
		return out
	}
	calls := ackReadCalls(reads, valid)
	cmds, _ := b.runScripts(ctx, ackReadScript, calls, nil)
	for j, cmd := range cmds {
		out[valid[j]] = ackReadResult(op, &reads[valid[j]], calls[j], cmd)
	}
	return out
}

// ackReadCalls are ackread.lua's calls for the reads valid of reads.
func ackReadCalls(reads []broker.FencedRead, valid []int) []scriptCall {
	calls := make([]scriptCall, len(valid))
	for j, i := range valid {
		r := &reads[i]
		args := make([]any, 0, 4+len(r.Ack))
		args = append(args, r.Fence.Token, r.Group, r.Count, readModes[r.Mode])
		for k := range r.Ack {
			args = append(args, &r.Ack[k])
		}
		calls[j] = scriptCall{keys: []string{r.Fence.LeaseKey, r.Stream}, args: args}
	}
	return calls
}

// ackReadResult is the outcome of r, which ran as c and answered cmd.
func ackReadResult(op string, r *broker.FencedRead, c scriptCall, cmd *redis.Cmd) broker.ReadResult {
	res, err := cmd.Slice()
	if err != nil {
		return broker.ReadResult{Err: mapErr(call{Op: op, Keys: c.keys, Fence: &r.Fence, Stream: r.Stream}, err)}
	}
	msgs, err := parseEntries(r.Stream, res)
	if err != nil {
		return broker.ReadResult{Err: fmt.Errorf("redisbroker: %s: %w", op, err)}
	}
	return broker.ReadResult{Messages: msgs}
}

// validRead checks a FencedRead's arguments as AckAndReadPartitionFenced
// does.
func (b *Broker) validRead(op string, r *broker.FencedRead) error {
	if err := validFence(op, r.Fence); err != nil {
		return err
	}
	if err := nonEmpty(op, "stream", r.Stream); err != nil {
		return err
	}
	if err := b.cfg.layout.ValidateName(op, "group", r.Group); err != nil {
		return err
	}
	if err := positive(op, "count", r.Count); err != nil {
		return err
	}
	if _, ok := readModes[r.Mode]; !ok {
		return &broker.InvalidArgumentError{Op: op, Arg: "mode", Value: strconv.Itoa(int(r.Mode)), Reason: "unknown read mode"}
	}
	for _, id := range r.Ack {
		if err := validID(op, id); err != nil {
			return err
		}
	}
	return nil
}

// AcquirePartitionLeases runs each request in one round trip
// (acquireread.lua per request, pipelined): the acquisition, the tails
// and, at the generation asked for, the first read, each request in one
// atomic step. A request with invalid arguments fails alone, before
// anything is sent.
func (b *Broker) AcquirePartitionLeases(ctx context.Context, reqs []broker.LeaseRequest) []broker.LeaseGrant {
	const op = "acquire lease"
	out := make([]broker.LeaseGrant, len(reqs))
	calls := make([]scriptCall, 0, len(reqs))
	sent := make([]int, 0, len(reqs))
	for i := range reqs {
		r := &reqs[i]
		ms, err := b.validLeaseRequest(op, r)
		if err != nil {
			out[i].Err = err
			continue
		}
		keys := make([]string, 0, 3+len(r.Tails)+len(r.Read))
		keys = append(keys, r.LeaseKey, r.GenerationKey)
		keys = append(keys, r.Tails...)
		keys = append(keys, r.Read...)
		if r.Index != "" {
			keys = append(keys, r.Index)
		}
		group, count := r.Group, r.Count
		if r.ReadAtGeneration == 0 || len(r.Read) == 0 {
			group, count = "", 0
		}
		calls = append(calls, scriptCall{keys: keys, args: []any{r.Owner, ms, len(r.Tails), r.ReadAtGeneration, group, count, r.Member}})
		sent = append(sent, i)
	}
	if len(calls) == 0 {
		return out
	}
	w := waitSpec(op, b.cfg.leaseReplicas)
	cmds, waits := b.runScripts(ctx, acquireReadScript, calls, w)
	var unreplicated []broker.Fence
	for j, cmd := range cmds {
		i := sent[j]
		out[i] = parseGrant(op, &reqs[i], calls[j].keys, cmd)
		if w == nil || !out[i].Acquired {
			continue
		}
		if err := waits[j].failure(w, reqs[i].LeaseKey); err != nil {
			// Not known to be on the replicas: nobody may use it.
			unreplicated = append(unreplicated, out[i].Lease.Fence)
			out[i] = broker.LeaseGrant{Err: err}
		}
	}
	if len(unreplicated) > 0 {
		b.releaseUnreplicated(ctx, unreplicated, w.r.Timeout)
	}
	return out
}

// AcquireChecksIndex says whether AcquirePartitionLeases honours a
// LeaseRequest's Index (broker.IndexCheckingAcquirer): on one server, not
// on a Cluster, where a category's index and a partition's lease live in
// different slots and no script may touch both.
func (b *Broker) AcquireChecksIndex(string) bool {
	_, ok := b.client.(*redis.Client)
	return ok
}

// validLeaseRequest checks a LeaseRequest's arguments and returns its TTL
// in milliseconds.
func (b *Broker) validLeaseRequest(op string, r *broker.LeaseRequest) (int64, error) {
	ms, err := acquireArgs(op, r.LeaseKey, r.GenerationKey, r.Owner, r.TTL)
	if err != nil {
		return 0, err
	}
	for _, s := range r.Tails {
		if err := nonEmpty(op, "stream", s); err != nil {
			return 0, err
		}
	}
	if r.Index != "" {
		if !b.AcquireChecksIndex("") {
			return 0, &broker.InvalidArgumentError{Op: op, Arg: "index", Value: r.Index,
				Reason: "an index check with the acquisition needs one Redis server (not a Cluster): check the index first (PartitionKeysIndexed)"}
		}
		if err := nonEmpty(op, "member", r.Member); err != nil {
			return 0, err
		}
	} else if r.Member != "" {
		return 0, &broker.InvalidArgumentError{Op: op, Arg: "member", Value: r.Member, Reason: "is set without an index"}
	}
	if r.ReadAtGeneration < 0 {
		return 0, &broker.InvalidArgumentError{Op: op, Arg: "read at generation", Value: strconv.FormatInt(r.ReadAtGeneration, 10), Reason: "must not be negative"}
	}
	if r.ReadAtGeneration > 0 && len(r.Read) > 0 {
		for _, s := range r.Read {
			if err := nonEmpty(op, "stream", s); err != nil {
				return 0, err
			}
		}
		if err := b.cfg.layout.ValidateName(op, "group", r.Group); err != nil {
			return 0, err
		}
		if err := positive(op, "count", r.Count); err != nil {
			return 0, err
		}
	}
	return ms, nil
}

// parseGrant decodes acquireread.lua's reply: {0}, or {g, tails, reads}.
func parseGrant(op string, r *broker.LeaseRequest, keys []string, cmd *redis.Cmd) broker.LeaseGrant {
	res, err := cmd.Slice()
	if err != nil {
		return broker.LeaseGrant{Err: mapErr(call{Op: op, Keys: keys}, err)}
	}
	bad := func(what string) broker.LeaseGrant {
		return broker.LeaseGrant{Err: fmt.Errorf("redisbroker: %s: unexpected reply: %s", op, what)}
	}
	if len(res) == 0 {
		return bad("empty")
	}
	g, ok := res[0].(int64)
	if !ok {
		return bad(fmt.Sprintf("generation %v", res[0]))
	}
	if g == -1 && r.Index != "" {
		return broker.LeaseGrant{NotIndexed: true}
	}
	lease, acquired, _ := newLease(r.LeaseKey, r.Owner, g)
	if !acquired {
		return broker.LeaseGrant{}
	}
	out := broker.LeaseGrant{Lease: lease, Acquired: true}
	if len(res) != 3 {
		// The lease is ours whatever else went wrong: the caller must
		// know, to release it.
		out.Err = fmt.Errorf("redisbroker: %s: unexpected reply of %d items", op, len(res))
		return out
	}
	tails, _ := res[1].([]any)
	out.Tails = make(map[string]string, len(r.Tails))
	for i, s := range r.Tails {
		id := "0-0"
		if i < len(tails) {
			if v, ok := tails[i].(string); ok {
				id = v
			}
		}
		out.Tails[s] = id
	}
	reads, _ := res[2].([]any)
	if len(reads) == 0 {
		return out
	}
	out.Read = make([]broker.ReadResult, len(r.Read))
	for i, s := range r.Read {
		var flat []any
		if i < len(reads) {
			flat, _ = reads[i].([]any)
		}
		msgs, err := parseEntries(s, flat)
		if err != nil {
			err = fmt.Errorf("redisbroker: %s: %w", op, err)
		}
		out.Read[i] = broker.ReadResult{Messages: msgs, Err: err}
	}
	return out
}
