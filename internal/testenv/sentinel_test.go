package testenv_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
)

// A forced failover promotes the replica, and a failover client follows
// it: its writes land on the new primary, which has the old one's data.
// The servers and the Sentinels require passwords of their own.
func TestSentinelPromoteIsFollowed(t *testing.T) {
	s := testenv.StartSentinel(t, testenv.WithSentinelPasswords("primary-pw", "sentinel-pw"))
	ctx := context.Background()
	c := s.FailoverClient(t)
	if err := c.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// WAIT: the replica has the write before it is promoted.
	if n, err := c.Wait(ctx, 1, 10*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d, %v", n, err)
	}
	old, err := s.Master(ctx)
	if err != nil || old != s.Servers[0] {
		t.Fatalf("the primary at start is %v (%v), want Servers[0]", old, err)
	}
	now, err := s.Promote(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if now != s.Servers[1] {
		t.Fatalf("promoted %s, want the replica %s", now.Addr, s.Servers[1].Addr)
	}
	testenv.Eventually(t, time.Minute, "a write through the failover client after the failover", func() (bool, string) {
		err := c.Set(ctx, "after", "2", 0).Err()
		return err == nil, fmt.Sprint(err)
	})
	direct := now.Client(t)
	if got, err := direct.MGet(ctx, "before", "after").Result(); err != nil || got[0] != "1" || got[1] != "2" {
		t.Fatalf("the new primary holds %v (%v), want [1 2]", got, err)
	}
}

// SIGKILL of the primary: the Sentinels notice, promote the replica, and
// the failover client carries on against it.
func TestSentinelKillFailsOver(t *testing.T) {
	s := testenv.StartSentinel(t)
	ctx := context.Background()
	c := s.FailoverClient(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s.Servers[0].Kill()
	now, err := s.WaitNewMaster(ctx, s.Servers[0].Addr)
	if err != nil {
		t.Fatal(err)
	}
	if now != s.Servers[1] {
		t.Fatalf("promoted %s, want %s", now.Addr, s.Servers[1].Addr)
	}
	testenv.Eventually(t, time.Minute, "a write after the kill", func() (bool, string) {
		err := c.Incr(ctx, "n").Err()
		return err == nil, fmt.Sprint(err)
	})
	if got, err := now.Client(t).Get(ctx, "n").Result(); err != nil || got != "1" {
		t.Fatalf("n on the new primary: %q, %v", got, err)
	}
}

// The proxy's blackhole makes a go-redis call time out; Heal restores
// it. Latency delays each reply by at least the latency; Drop closes the
// open connections.
func TestProxyFaults(t *testing.T) {
	r := testenv.StartRedis(t)
	p := testenv.StartProxy(t, r.Addr)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, PoolSize: 1})
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	t.Run("blackhole", func(t *testing.T) {
		for _, dir := range []testenv.Direction{testenv.Up, testenv.Down, testenv.Both} {
			p.Blackhole(dir)
			err := c.Get(ctx, "k").Err()
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("direction %d blackholed: GET returned %v, want a timeout", dir, err)
			}
			p.Heal()
			testenv.Eventually(t, time.Minute, "GET after Heal", func() (bool, string) {
				err := c.Get(ctx, "k").Err()
				return err == nil, fmt.Sprint(err)
			})
		}
	})

	t.Run("latency", func(t *testing.T) {
		p.SetLatency(testenv.Down, 150*time.Millisecond)
		slow := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, ReadTimeout: 10 * time.Second})
		defer slow.Close()
		start := time.Now()
		if err := slow.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		// A lower bound only: latency is added, so a reply can never be
		// quicker than it (the machine's load only adds to it).
		if took := time.Since(start); took < 150*time.Millisecond {
			t.Fatalf("PING took %s through 150ms of latency", took)
		}
		p.Heal()
	})

	t.Run("drop", func(t *testing.T) {
		hold := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, PoolSize: 1})
		defer hold.Close()
		conn := hold.Conn()
		defer conn.Close()
		if err := conn.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		p.Drop()
		if err := conn.Ping(ctx).Err(); err == nil {
			t.Fatal("PING on a dropped connection succeeded")
		}
		if err := c.Ping(ctx).Err(); err == nil {
			t.Fatal("a new connection was not dropped")
		}
		p.Heal()
		testenv.Eventually(t, time.Minute, "PING after Heal", func() (bool, string) {
			err := c.Ping(ctx).Err()
			return err == nil, fmt.Sprint(err)
		})
	})
}
