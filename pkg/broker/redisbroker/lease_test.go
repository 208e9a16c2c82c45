package redisbroker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

func TestAcquireSetsTokenTTLAndGeneration(t *testing.T) {
	b, c := newBroker(t)
	l := acquire(t, b, key, owner, 10*time.Second)
	if l.Generation != 1 || l.Token != "node-a:1" || l.Owner != owner || l.LeaseKey != layout.LeaseKey(group, key) {
		t.Fatalf("lease = %+v", l)
	}
	pttl := c.PTTL(t.Context(), l.LeaseKey).Val()
	if pttl <= 9*time.Second || pttl > 10*time.Second {
		t.Fatalf("lease PTTL = %s, want about 10s", pttl)
	}
	if g := c.Get(t.Context(), layout.GenerationKey(group, key)).Val(); g != "1" {
		t.Fatalf("generation = %q", g)
	}
}

func TestAcquireRoundsSubMillisecondTTLUp(t *testing.T) {
	b, c := newBroker(t)
	l := acquire(t, b, key, owner, 300*time.Microsecond)
	// PX 0 would be refused by the server; the TTL becomes 1ms instead.
	if pttl := c.PTTL(t.Context(), l.LeaseKey).Val(); pttl > time.Millisecond {
		t.Fatalf("PTTL = %s, want at most 1ms", pttl)
	}
}

func TestAcquireContinuesAnExistingGeneration(t *testing.T) {
	b, c := newBroker(t)
	// A Protean deployment has run for a while: the counter is at 41.
	c.Set(t.Context(), layout.GenerationKey(group, key), "41", 0)
	if l := acquire(t, b, key, owner, time.Second); l.Generation != 42 || l.Token != "node-a:42" {
		t.Fatalf("lease = %+v, want generation 42", l)
	}
}

func TestRenewResetsTTL(t *testing.T) {
	b, c := newBroker(t)
	l := acquire(t, b, key, owner, time.Second)
	ok, err := b.RenewPartitionLease(t.Context(), l.Fence, time.Minute)
	if err != nil || !ok {
		t.Fatalf("renew = %v, %v", ok, err)
	}
	if pttl := c.PTTL(t.Context(), l.LeaseKey).Val(); pttl <= 59*time.Second {
		t.Fatalf("PTTL after renew = %s, want about 1m", pttl)
	}
	// A superseded token does not touch the TTL.
	ok, err = b.RenewPartitionLease(t.Context(), broker.Fence{LeaseKey: l.LeaseKey, Token: "node-b:1"}, time.Hour)
	if err != nil || ok {
		t.Fatalf("renew with another token = %v, %v", ok, err)
	}
	if pttl := c.PTTL(t.Context(), l.LeaseKey).Val(); pttl > time.Minute {
		t.Fatalf("a refused renew changed the PTTL to %s", pttl)
	}
}

func TestReleaseKeepsGeneration(t *testing.T) {
	b, c := newBroker(t)
	l := acquire(t, b, key, owner, time.Minute)
	if ok, err := b.ReleasePartitionLease(t.Context(), l.Fence); err != nil || !ok {
		t.Fatalf("release = %v, %v", ok, err)
	}
	if n := c.Exists(t.Context(), l.LeaseKey).Val(); n != 0 {
		t.Fatal("lease survived release")
	}
	if g := c.Get(t.Context(), layout.GenerationKey(group, key)).Val(); g != "1" {
		t.Fatalf("generation after release = %q, want 1", g)
	}
	if ok, err := b.ReleasePartitionLease(t.Context(), l.Fence); err != nil || ok {
		t.Fatalf("second release = %v, %v; want false", ok, err)
	}
}

func TestLeaseCallsOnWrongTypesChangeNothing(t *testing.T) {
	lk, gk := layout.LeaseKey(group, key), layout.GenerationKey(group, key)
	f := broker.Fence{LeaseKey: lk, Token: "node-a:1"}
	tests := []struct {
		name      string
		call      func(t *testing.T, b broker.PartitionedBroker) error
		key, want string
	}{
		{
			name: "acquire with a set as lease",
			call: func(t *testing.T, b broker.PartitionedBroker) error {
				_, _, err := b.AcquirePartitionLease(t.Context(), lk, gk, owner, time.Second)
				return err
			},
			key: lk, want: "string",
		},
		{
			name: "acquire at a generation with a set as lease",
			call: func(t *testing.T, b broker.PartitionedBroker) error {
				g := int64(7)
				_, err := b.(*redisbroker.Broker).AcquirePartitionLeaseAt(t.Context(), lk, gk, owner, time.Second, &g)
				return err
			},
			key: lk, want: "string",
		},
		{
			name: "batched acquire with a set as lease",
			call: func(t *testing.T, b broker.PartitionedBroker) error {
				return b.(*redisbroker.Broker).AcquirePartitionLeases(t.Context(), []broker.LeaseRequest{{LeaseKey: lk, GenerationKey: gk, Owner: owner, TTL: time.Second}})[0].Err
			},
			key: lk, want: "string",
		},
		{
			name: "renew of a set",
			call: func(t *testing.T, b broker.PartitionedBroker) error {
				_, err := b.RenewPartitionLease(t.Context(), f, time.Second)
				return err
			},
			key: lk, want: "string",
		},
		{
			name: "release of a set",
			call: func(t *testing.T, b broker.PartitionedBroker) error {
				_, err := b.ReleasePartitionLease(t.Context(), f)
				return err
			},
			key: lk, want: "string",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, c := newBroker(t)
			c.SAdd(t.Context(), lk, "x")
			c.Set(t.Context(), gk, "7", 0)
			before := snapshot(t, c)
			wantWrongType(t, tt.name, tt.call(t, b), tt.key, tt.want)
			wantUnchanged(t, c, before)
		})
	}

	t.Run("acquire with a set as generation", func(t *testing.T) {
		b, c := newBroker(t)
		c.SAdd(t.Context(), gk, "x")
		before := snapshot(t, c)
		_, _, err := b.AcquirePartitionLease(t.Context(), lk, gk, owner, time.Second)
		wantWrongType(t, "acquire", err, gk, "string")
		wantUnchanged(t, c, before)
	})
	t.Run("batched acquire with a set as generation", func(t *testing.T) {
		b, c := newBroker(t)
		c.SAdd(t.Context(), gk, "x")
		before := snapshot(t, c)
		g := b.AcquirePartitionLeases(t.Context(), []broker.LeaseRequest{{LeaseKey: lk, GenerationKey: gk, Owner: owner, TTL: time.Second}})[0]
		wantWrongType(t, "batched acquire", g.Err, gk, "string")
		if g.Acquired {
			t.Fatal("acquired")
		}
		wantUnchanged(t, c, before)
	})
	// A generation no lease can be taken from: not an integer, or not
	// written as Redis writes one (INCR refuses it, and its error names
	// no key), negative (-1 would come out as generation 0, the scripts'
	// "held"), or past 14 digits once incremented (Lua writes such a
	// number as 1e+14 into the lease's token).
	for _, g := range []string{"seven", "007", "+7", " 7", "7 ", "1.5", "-0", "", "-1", "99999999999999", "9223372036854775806", "99999999999999999999", "-9223372036854775808"} {
		t.Run(fmt.Sprintf("acquire with generation %q", g), func(t *testing.T) {
			b, c := newBroker(t)
			c.Set(t.Context(), gk, g, 0)
			before := snapshot(t, c)
			_, _, err := b.AcquirePartitionLease(t.Context(), lk, gk, owner, time.Second)
			wantWrongType(t, "acquire", err, gk, "integer")
			wantUnchanged(t, c, before)
			res := b.AcquirePartitionLeases(t.Context(), []broker.LeaseRequest{{LeaseKey: lk, GenerationKey: gk, Owner: owner, TTL: time.Second}})[0]
			wantWrongType(t, "batched acquire", res.Err, gk, "integer")
			wantUnchanged(t, c, before)
		})
	}
	// The edges INCR takes.
	for g, want := range map[string]int64{"0": 1, "41": 42, "99999999999998": 99999999999999} {
		t.Run(fmt.Sprintf("acquire with generation %q", g), func(t *testing.T) {
			b, c := newBroker(t)
			c.Set(t.Context(), gk, g, 0)
			l, ok, err := b.AcquirePartitionLease(t.Context(), lk, gk, owner, time.Second)
			if err != nil || !ok || l.Generation != want {
				t.Fatalf("acquired %v at %d, %v; want generation %d", ok, l.Generation, err, want)
			}
			if got := c.Get(t.Context(), lk).Val(); got != l.Fence.Token || got != fmt.Sprintf("%s:%d", owner, want) {
				t.Fatalf("lease holds %q, token %q; want %s:%d", got, l.Fence.Token, owner, want)
			}
		})
	}
}

func TestLeaseArgumentsAreCheckedBeforeIO(t *testing.T) {
	b := unreachableBroker(t) // any I/O would fail with ErrUnavailable instead
	lk, gk := layout.LeaseKey(group, key), layout.GenerationKey(group, key)
	ctx := t.Context()
	_, _, err := b.AcquirePartitionLease(ctx, "", gk, owner, time.Second)
	wantInvalid(t, "acquire without lease key", err, "lease key")
	_, _, err = b.AcquirePartitionLease(ctx, lk, "", owner, time.Second)
	wantInvalid(t, "acquire without generation key", err, "generation key")
	_, _, err = b.AcquirePartitionLease(ctx, lk, gk, "", time.Second)
	wantInvalid(t, "acquire without owner", err, "owner")
	_, _, err = b.AcquirePartitionLease(ctx, lk, gk, owner, 0)
	wantInvalid(t, "acquire with ttl 0", err, "ttl")
	_, err = b.RenewPartitionLease(ctx, broker.Fence{LeaseKey: lk}, time.Second)
	wantInvalid(t, "renew without token", err, "fence token")
	_, err = b.RenewPartitionLease(ctx, broker.Fence{LeaseKey: lk, Token: "a:1"}, -time.Second)
	wantInvalid(t, "renew with negative ttl", err, "ttl")
	_, err = b.ReleasePartitionLease(ctx, broker.Fence{Token: "a:1"})
	wantInvalid(t, "release without lease key", err, "lease key")
}

// AcquirePartitionLeaseAt takes a free lease only at the generation the
// caller saw: a lease held, or a counter that moved (the partition was
// leased and released since), changes nothing, not even the counter.
func TestAcquireAtChangesNothingUnlessFreeAtTheGeneration(t *testing.T) {
	b, c := newBroker(t)
	ctx := t.Context()
	lk, gk := layout.LeaseKey(group, key), layout.GenerationKey(group, key)
	six, nine := int64(6), int64(9)

	// Never leased: only nil matches.
	got, err := b.AcquirePartitionLeaseAt(ctx, lk, gk, owner, time.Minute, &six)
	if err != nil || got.Acquired || !got.Moved || got.Now != nil || c.Exists(ctx, lk, gk).Val() != 0 {
		t.Fatalf("never leased, asked at 6: %+v, %v", got, err)
	}
	c.Set(ctx, gk, "9", 0)
	got, err = b.AcquirePartitionLeaseAt(ctx, lk, gk, owner, time.Minute, &six)
	if err != nil || got.Acquired || !got.Moved || got.Now == nil || *got.Now != 9 {
		t.Fatalf("at 9, asked at 6: %+v, %v", got, err)
	}
	if g := c.Get(ctx, gk).Val(); g != "9" || c.Exists(ctx, lk).Val() != 0 {
		t.Fatalf("a moved counter was changed: generation %s", g)
	}
	got, err = b.AcquirePartitionLeaseAt(ctx, lk, gk, owner, time.Minute, &nine)
	if err != nil || !got.Acquired || got.Lease.Generation != 10 || got.Lease.Token != owner+":10" {
		t.Fatalf("at 9, asked at 9: %+v, %v", got, err)
	}
	if v := c.Get(ctx, lk).Val(); v != owner+":10" {
		t.Fatalf("lease %q", v)
	}
	// Held now: nothing changes, and the holder is named.
	ten := int64(10)
	got, err = b.AcquirePartitionLeaseAt(ctx, lk, gk, "node-z", time.Minute, &ten)
	if err != nil || got.Acquired || got.Held != owner+":10" || c.Get(ctx, gk).Val() != "10" {
		t.Fatalf("held: %+v, %v", got, err)
	}
}

// The batched acquisition (acquireread.lua) looks at every lane it tails
// or reads before it takes the lease: a lane of the wrong type fails the
// request with the lane named, and leaves the lease free and the
// generation where it was, whether the lane is tailed, read, or both.
// Held by someone else, the lease is refused before the lanes are looked
// at.
func TestBatchedAcquireOnAWrongTypeLaneChangesNothing(t *testing.T) {
	lk, gk := layout.LeaseKey(group, key), layout.GenerationKey(group, key)
	st, bf := layout.Stream(cat, key), layout.Stream(cat, key)+":backfill"
	tests := []struct {
		name        string
		tails, read []string
		bad         string
		readAt      int64 // the generation granted is 5
	}{
		{"a tailed lane", []string{st, bf}, nil, bf, 5},
		{"a lane tailed and read", []string{st, bf}, []string{st}, st, 5},
		{"a lane read only", nil, []string{st}, st, 5},
		{"a lane to read at another generation", nil, []string{st}, st, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, c := newBroker(t)
			c.Set(t.Context(), gk, "4", 0)
			for _, s := range []string{st, bf} {
				if s != tt.bad {
					c.XAdd(t.Context(), &redis.XAddArgs{Stream: s, Values: []any{"data", "x"}})
				}
			}
			c.HSet(t.Context(), tt.bad, "f", "v")
			before := snapshot(t, c)
			g := b.AcquirePartitionLeases(t.Context(), []broker.LeaseRequest{{LeaseKey: lk, GenerationKey: gk, Owner: owner, TTL: time.Minute,
				Tails: tt.tails, Read: tt.read, ReadAtGeneration: tt.readAt, Group: group, Count: 10}})[0]
			wantWrongType(t, tt.name, g.Err, tt.bad, "stream")
			if g.Acquired {
				t.Fatal("acquired")
			}
			wantUnchanged(t, c, before)
		})
	}
	t.Run("held by another", func(t *testing.T) {
		b, c := newBroker(t)
		c.Set(t.Context(), lk, "other:4", time.Minute)
		c.Set(t.Context(), gk, "4", 0)
		c.HSet(t.Context(), st, "f", "v")
		before := snapshot(t, c)
		g := b.AcquirePartitionLeases(t.Context(), []broker.LeaseRequest{{LeaseKey: lk, GenerationKey: gk, Owner: owner, TTL: time.Minute,
			Tails: []string{st}, Read: []string{st}, ReadAtGeneration: 5, Group: group, Count: 10}})[0]
		if g.Err != nil || g.Acquired {
			t.Fatalf("grant = %+v, want refused without error", g)
		}
		wantUnchanged(t, c, before)
	})
}
