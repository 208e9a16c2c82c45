package partitioned_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
	"github.com/protctl/protctl/pkg/runtime/storetest"
)

// parkOne starts node-1 with mutate, parks aggregate a (its entry 1 fails
// until fixed is set) and waits until the ledger holds it parked.
func parkOne(t *testing.T, e *redisEnv, rec *recorder, fixed *atomic.Bool, mutate func(*partitioned.Config)) {
	t.Helper()
	publishAll(t, e.pub, []string{"a"}, 1, 2)
	rec.setFail(func(m runtime.Message) error {
		if m.Key == "a" && seqOf(t, m.Data) == 1 && !fixed.Load() {
			return errors.New("poison")
		}
		return nil
	})
	e.start("node-1", rec.handler("node-1"), mutate, nil)
	eventually(t, 20*time.Second, 10*time.Millisecond, "a parked", func() bool {
		p, err := e.store.GetParked(context.Background(), group, "", "a")
		return err == nil && p.Status == ledger.StatusParked
	})
}

// An operator's retry made before the node's request watch was confirmed
// sent a signal nobody heard. The node reads the ledger again once the
// watch is confirmed, so the retry is carried out now, not at the next
// periodic read (an hour away here; 30 s by default).
func TestRedisRequestBeforeTheWatchIsConfirmedIsCarriedOut(t *testing.T) {
	e := newRedisEnv(t)
	rec := newRecorder(t)
	var fixed atomic.Bool
	release := make(chan struct{})
	parkOne(t, e, rec, &fixed, func(c *partitioned.Config) {
		c.Ledger = storetest.HeldWatch{Ledger: c.Ledger, Release: release}
		c.LedgerPollEvery = time.Hour
	})
	fixed.Store(true)
	if err := e.store.RequestRetry(context.Background(), group, "", "a", "ops"); err != nil {
		t.Fatal(err)
	}
	close(release)
	eventually(t, 20*time.Second, 10*time.Millisecond, "a retried", func() bool { return rec.complete(map[string]int{"a": 2}) })
}

// The node's connections are cut for a moment (a network fault, a proxy
// restarting) while an operator retries and publishers append to idle
// partitions. go-redis would subscribe again silently once the network is
// back, and a request published during the cut would wait for the next
// periodic read of the ledger (an hour away here): the watch ends
// instead, and the node watches again and reads the ledger. On baf293e
// the retry was never carried out. Then the server kills the Pub/Sub
// connections (CLIENT KILL) while entries keep coming: none is lost.
func TestRedisLostWatchConnectionsLoseNoRequestAndNoEntry(t *testing.T) {
	proxy := testenv.StartProxy(t, server.Addr) // closed after the node stopped
	e := newRedisEnv(t)
	rec := newRecorder(t)
	var fixed atomic.Bool
	direct := e.addr
	e.addr = proxy.Addr // the node's clients go through the proxy
	parkOne(t, e, rec, &fixed, func(c *partitioned.Config) {
		c.LedgerPollEvery = time.Hour
		c.IdleAfter = 20 * time.Millisecond
	})
	e.addr = direct
	publishAll(t, e.pub, []string{"b"}, 1, 1)
	protean(t, e.c, "c", 1)
	eventually(t, 20*time.Second, 10*time.Millisecond, "b and c handled", func() bool {
		return rec.complete(map[string]int{"b": 1, "c": 1})
	})
	idle(t, e.subs[0], "b", "c")

	ctx := context.Background()
	proxy.Drop()
	fixed.Store(true)
	if err := e.store.RequestRetry(ctx, group, "", "a", "ops"); err != nil {
		t.Fatal(err)
	}
	publishAll(t, e.pub, []string{"b"}, 2, 2)
	protean(t, e.c, "c", 2)
	time.Sleep(200 * time.Millisecond) // the cut lasts a while (well under the lease TTL)
	proxy.Heal()
	eventually(t, 20*time.Second, 10*time.Millisecond, "a retried, b and c handled after the cut", func() bool {
		return rec.complete(map[string]int{"a": 2, "b": 2, "c": 2})
	})

	for seq := 3; seq <= 5; seq++ {
		idle(t, e.subs[0], "b", "c")
		if err := e.c.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
			t.Fatal(err)
		}
		publishAll(t, e.pub, []string{"b"}, seq, seq)
		protean(t, e.c, "c", seq)
		want := map[string]int{"b": seq, "c": seq}
		eventually(t, 20*time.Second, 10*time.Millisecond, "b and c handled after the kill", func() bool { return rec.complete(want) })
	}
	rec.checkOrder(t, map[string]int{"a": 2, "b": 5, "c": 5})
}

// idle waits until sub holds none of keys' leases: their next entries
// need a wake-up.
func idle(t *testing.T, sub *partitioned.Subscription, keys ...string) {
	t.Helper()
	eventually(t, 20*time.Second, 5*time.Millisecond, "the keys idle", func() bool {
		for _, h := range sub.Status().Held {
			if slices.Contains(keys, h.Partition) {
				return false
			}
		}
		return true
	})
}
