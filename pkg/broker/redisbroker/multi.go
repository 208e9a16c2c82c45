package redisbroker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

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
// transactions off too, and the connection is dropped.

// multiStates keeps, per client, whether its server allows MULTI.
type multiStates struct{ m sync.Map } // *redis.Client -> *atomic.Int32

const (
	multiUnknown int32 = iota
	multiAllowed
	multiRefused
)

func (s *multiStates) of(c *redis.Client) *atomic.Int32 {
	if v, ok := s.m.Load(c); ok {
		return v.(*atomic.Int32)
	}
	v, _ := s.m.LoadOrStore(c, new(atomic.Int32))
	return v.(*atomic.Int32)
}

// multiAllowed says whether fenced transactions may run on c: its server
// allows this client MULTI. The first call per client asks the server;
// one that cannot (the server is unreachable) says no, and the next call
// asks again.
func (b *Broker) multiAllowed(ctx context.Context, c *redis.Client) bool {
	st := b.multi.of(c)
	switch st.Load() {
	case multiAllowed:
		return true
	case multiRefused:
		return false
	}
	// MULTI and EXEC (an empty transaction), which the fenced
	// transactions need anyway; DISCARD may not be granted. A server that
	// allows MULTI and refuses EXEC is not one transactions can run on
	// either, and leaves the connection inside a transaction: no ACL
	// protctl writes does that (internal/acl).
	var multi, exec *redis.Cmd
	_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		multi = p.Do(ctx, "multi")
		exec = p.Do(ctx, "exec")
		return nil
	})
	merr, eerr := multi.Err(), exec.Err()
	switch {
	case merr == nil && eerr == nil:
		st.CompareAndSwap(multiUnknown, multiAllowed)
		return true
	case isRedisError(merr) || isRedisError(eerr):
		st.Store(multiRefused)
	}
	return false
}

// multiRefusedBy reports whether err, a transaction's (TxPipelined's)
// error, is the server refusing MULTI itself: a reply error that is
// neither EXEC's refusal (a watched key changed) nor EXECABORT (a queued
// command refused, nothing ran), which go-redis then sets on every
// queued command alike (it reads no reply past MULTI's), where an error
// inside EXEC is one command's own. Then the queued commands ran at once,
// their replies are unread on conn: c's transactions are turned off (the
// scripts run from now on) and conn is dropped.
func (b *Broker) multiRefusedBy(c *redis.Client, conn *redis.Conn, err error, queued ...redis.Cmder) bool {
	if err == nil || !isRedisError(err) || errors.Is(err, redis.TxFailedErr) || redis.IsExecAbortError(err) {
		return false
	}
	for _, q := range queued {
		if q != nil && q.Err() != err {
			return false
		}
	}
	b.multi.of(c).Store(multiRefused)
	dropConn(conn)
	return true
}

// dropConn makes go-redis drop conn's network connection instead of
// pooling it: a call whose deadline has passed fails to write, and a
// connection that timed out is closed, whatever it held unread.
func dropConn(conn *redis.Conn) {
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_ = conn.Ping(ctx).Err()
}

// isRedisError says whether err is an error reply of the server.
func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}
