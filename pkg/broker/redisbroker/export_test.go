package redisbroker

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Scripts are every script of the package, by name, for tests that load
// them ahead of time or check that each one was exercised.
var Scripts = map[string]*redis.Script{
	"acquire":     acquireScript,
	"acquireat":   acquireAtScript,
	"acquireread": acquireReadScript,
	"renew":       renewScript,
	"release":     releaseScript,
	"read":        readScript,
	"ack":         ackScript,
	"ackread":     ackReadScript,
	"reclaim":     reclaimScript,
	"deadletter":  deadLetterScript,
	"trim":        trimScript,
	"reap":        reapScript,
	"reaplanes":   reapLanesScript,
	"publish":     publishScript,
	"append":      appendScript,
	"record":      recordScript,
	"dlqreplay":   dlqReplayScript,
	"dlqdelete":   dlqDeleteScript,
}

// SetBetweenTx makes fn run between the two round trips of every fenced
// transaction of b (after the lease check, before EXEC).
func SetBetweenTx(b *Broker, fn func()) { b.betweenTx = fn }

// SetBeforeWait makes fn run in each XREAD goroutine of b's
// WaitForEntries before its XREAD is sent (fn may hold it back).
func SetBeforeWait(b *Broker, fn func()) { b.beforeWait = fn }

// WithScriptReads makes every fenced read run its script, never the
// transaction, so that tests cover the script path too.
func WithScriptReads() Option { return func(c *config) { c.scriptReads = true } }

// KeySlot is the Redis Cluster hash slot of a key (CRC16 of its hash tag).
var KeySlot = keySlot

// ProbeMulti runs b's one-time check that c's server allows MULTI
// (multi.go) ahead of a test that counts a call's commands or round
// trips, and says what it found.
func ProbeMulti(b *Broker, c *redis.Client) bool { return b.multiAllowed(context.Background(), c) }

// MultiChecked is how many clients' MULTI answers b keeps.
func MultiChecked(b *Broker) int { return b.multi.len() }

// SetBeforeWaitRead makes fn run in each WaitAndReadPartitionsFenced call
// right before its pipeline is sent.
func SetBeforeWaitRead(b *Broker, fn func()) { b.beforeWaitRead = fn }
