package testenv

import (
	"context"
	"testing"
	"time"
)

func TestRedisStartsOnLoopbackNotDefaultPort(t *testing.T) {
	r := StartRedis(t)
	if r.Port == 6379 {
		t.Fatalf("test server must never use 6379")
	}
	c := r.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := c.Get(ctx, "k").Val(); got != "v" {
		t.Fatalf("get = %q, want v", got)
	}
}

func TestRedisPauseResumeRestart(t *testing.T) {
	r := StartRedis(t)
	c := r.Client(t)
	ctx := context.Background()
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err := c.Ping(short).Err()
	cancel()
	if err == nil {
		t.Fatal("ping to a paused server succeeded")
	}
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping after resume: %v", err)
	}
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping after restart: %v", err)
	}
}
