package inspect_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
)

// Which keys are a category's dead-letter streams: its own C:dlq and
// C:<backfill>:dlq, and C:K:dlq for a valid key K; not the streams of a
// longer category name that shares the prefix, nor reserved names.
func TestDeadLettersFindsTheCategorysStreams(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	add := func(stream string) string {
		t.Helper()
		id, err := c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"data", `{"n":1,"_dlq_metadata":{"failure_reason":"r of ` + stream + `"}}`}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	for _, s := range []string{"shop::order:dlq", "shop::order:backfill:dlq", "shop::order:o-2:dlq", "shop::order:o-1:dlq",
		"shop::order:x:o-3:dlq", "shop::order:__x__:dlq", "shop::order:o-1", "shop::orders:o-4:dlq"} {
		add(s)
	}
	in := inspect.New(c, broker.ProteanLayout)
	dls, err := in.DeadLetters(ctx, inspect.DeadLetterQuery{Category: "shop::order"})
	if err != nil {
		t.Fatal(err)
	}
	var streams []string
	for _, d := range dls {
		streams = append(streams, d.Stream)
		if d.FailureReason != "r of "+d.Stream || d.Digest == "" || len(d.Fields) != 2 {
			t.Errorf("%s read as %+v", d.Stream, d)
		}
	}
	want := []string{"shop::order:backfill:dlq", "shop::order:dlq", "shop::order:o-1:dlq", "shop::order:o-2:dlq"}
	if !slices.Equal(streams, want) {
		t.Fatalf("streams %v, want %v", streams, want)
	}
	dls, _ = in.DeadLetters(ctx, inspect.DeadLetterQuery{Category: "shop::order", Key: "o-*", Reason: regexp.MustCompile("o-2")})
	if len(dls) != 1 || dls[0].Key != "o-2" {
		t.Fatalf("filtered %+v", dls)
	}
	if _, err := in.DeadLetters(ctx, inspect.DeadLetterQuery{Category: "shop::order", Key: "["}); !errors.Is(err, broker.ErrInvalidArgument) {
		t.Fatalf("a bad glob: %v", err)
	}
}

// DeadLetterGroupKnown finds a group by each of its traces, and no other
// name: a dead letter of the category recording it, the category's
// registry, a consumer group of the category's own stream, a lease or
// generation key; an unknown category is ErrNotFound.
func TestDeadLetterGroupKnown(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	cat := testenv.Protean(t, c).Category("shop::order")
	cat.Partition("o-1").Entries(1)
	cat.DeadLetter(testenv.ProteanDeadLetter{Group: "dl.G"})
	cat.RegisterGroup("registered.G")
	if err := c.XGroupCreateMkStream(ctx, "shop::order", "own.G", "$").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, broker.ProteanLayout.LeaseKey("leased.G", "o-1"), "n:1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	in := inspect.New(c, broker.ProteanLayout)
	for group, want := range map[string]bool{"dl.G": true, "registered.G": true, "own.G": true, "leased.G": true, "nope.G": false} {
		got, err := in.DeadLetterGroupKnown(ctx, "shop::order", group, inspect.ScanOptions{})
		if err != nil || got != want {
			t.Errorf("DeadLetterGroupKnown(%q) = %v, %v; want %v", group, got, err, want)
		}
	}
	if _, err := in.DeadLetterGroupKnown(ctx, "no::such", "dl.G", inspect.ScanOptions{}); !errors.Is(err, inspect.ErrNotFound) {
		t.Errorf("unknown category: %v, want ErrNotFound", err)
	}
}
