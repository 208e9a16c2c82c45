package redisbroker

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// The fenced transactions (fencedtx.go, batchtx.go) rest on MULTI: the
// commands queued after it run at EXEC, and only if no watched lease
// changed. A server that refuses MULTI itself (an ACL without +multi)
// runs those commands at once instead, outside the transaction and its
// WATCH: the read and the ack would run unfenced, and go-redis, which
// stops reading at the refused MULTI, would hand the connection back
// with their replies unread, for the next caller to take as its own.
// So each client's server is asked once whether it allows MULTI (MULTI
// then EXEC, one round trip) before its first transaction; where it
// does not, the scripts run, which need no MULTI. A refusal a
// transaction meets later (the ACL changed since) turns the client's
// transactions off too.

// multiStates keeps, per client, whether its server allows MULTI. It
// holds its clients weakly: a Cluster replaces its node clients as its
// topology changes, and a client's entry goes with it (a node client's
// stayed for good before, one for every node the Cluster ever had).
type multiStates struct{ m sync.Map } // weak.Pointer[redis.Client] -> *multiState

type multiState struct {
	state atomic.Int32
	// retryAt is when a check that got no answer (the server
	// unreachable) may be tried again (unix nanoseconds): until then the
	// scripts run, and an outage costs each read no extra check.
	retryAt atomic.Int64
}

const (
	multiUnknown int32 = iota
	multiAllowed
	multiRefused
)

// multiRetry is how long after a check that got no answer the next one
// waits.
const multiRetry = time.Second

func (s *multiStates) of(c *redis.Client) *multiState {
	k := weak.Make(c)
	if v, ok := s.m.Load(k); ok {
		return v.(*multiState)
	}
	v, loaded := s.m.LoadOrStore(k, new(multiState))
	if !loaded {
		runtime.AddCleanup(c, func(k weak.Pointer[redis.Client]) { s.m.Delete(k) }, k)
	}
	return v.(*multiState)
}

// len is how many clients' answers are kept.
func (s *multiStates) len() int {
	n := 0
	s.m.Range(func(any, any) bool { n++; return true })
	return n
}

// multiAllowed says whether fenced transactions may run on c: its server
// allows this client MULTI. The first call per client asks the server;
// one that gets no answer (the server is unreachable) says no, and a
// call a second later asks again.
func (b *Broker) multiAllowed(ctx context.Context, c *redis.Client) bool {
	st := b.multi.of(c)
	switch st.state.Load() {
	case multiAllowed:
		return true
	case multiRefused:
		return false
	}
	if time.Now().UnixNano() < st.retryAt.Load() {
		return false
	}
	// An empty transaction: MULTI and EXEC, which the fenced
	// transactions need anyway. Where EXEC is refused (an ACL with +multi
	// and not +exec) the server aborts the transaction (EXECABORT), so
	// the connection is not left inside one. No DISCARD: the node's ACL
	// profile does not grant it, and each refusal would be an entry of
	// the server's ACL LOG at every start.
	var multi, exec *redis.Cmd
	_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		multi = p.Do(ctx, "multi")
		exec = p.Do(ctx, "exec")
		return nil
	})
	ok, _ := multi.Val().(string)
	merr, eerr := multi.Err(), exec.Err()
	switch {
	case ok == "OK" && eerr == nil:
		st.state.CompareAndSwap(multiUnknown, multiAllowed)
		return true
	case isRedisError(merr) || (ok == "OK" && isRedisError(eerr)):
		st.state.Store(multiRefused)
	default:
		// No answer: the connection failed, or was refused before the
		// pipeline (a refused login leaves every command without a
		// reply and without an error).
		st.retryAt.Store(time.Now().Add(multiRetry).UnixNano())
	}
	return false
}

// multiRefusedBy reports whether err, a transaction's (TxPipelined's)
// error, is the server refusing MULTI itself: a reply error that is
// neither EXEC's refusal (a watched key changed) nor EXECABORT (a queued
// command refused, nothing ran), which go-redis then sets on every
// queued command alike (it reads no reply past MULTI's), where an error
// inside EXEC is one command's own. Then the queued commands ran at once
// and c's transactions are turned off: the scripts run from now on. Their
// replies are left unread on the connection, which go-redis drops when it
// goes back to the pool (a connection with data buffered, or readable, is
// closed, not pooled); the caller must not use it for anything else.
func (b *Broker) multiRefusedBy(c *redis.Client, err error, queued ...redis.Cmder) bool {
	if err == nil || !isRedisError(err) || errors.Is(err, redis.TxFailedErr) || redis.IsExecAbortError(err) {
		return false
	}
	for _, q := range queued {
		if q != nil && q.Err() != err {
			return false
		}
	}
	b.multi.of(c).state.Store(multiRefused)
	return true
}

// isRedisError says whether err is an error reply of the server: not nil,
// and not a transport failure (pinned.go).
func isRedisError(err error) bool { return err != nil && !transport(err) }
