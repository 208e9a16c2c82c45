package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// A server that refuses the client's credentials fails every ledger call
// with its WRONGPASS reply in the chain (what the CLI exits 3 on): go-redis
// reports the refused connection as the pipeline's error only, and a call
// that dropped it read the empty replies as an empty ledger, or as a
// record key "" holding no JSON entry.
func TestLedgerCallsFailWithTheRefusedLogin(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.WithPassword("right"))
	o := srv.Options()
	o.Password = "wrong"
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	s := redisstore.New(c)
	ctx := context.Background()
	const sub, agg = "demo.OrderProjector", "o-0005"
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"GetParked", func() error { _, err := s.GetParked(ctx, sub, "", agg); return err }},
		{"ListParked of one subscription", func() error { _, err := s.ListParked(ctx, sub); return err }},
		{"ListParked of all", func() error { _, err := s.ListParked(ctx, ""); return err }},
		{"RequestRetry", func() error { return s.RequestRetry(ctx, sub, "", agg, "me") }},
		{"RequestSkip", func() error { return s.RequestSkip(ctx, sub, "", agg, "why", "me") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var rerr redis.Error
			if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
				t.Fatalf("err %v, want the server's WRONGPASS", err)
			}
			if !errors.As(err, &rerr) {
				t.Fatalf("err %v does not wrap the reply (redis.Error)", err)
			}
		})
	}
}
