package redisstore_test

import (
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// server is the package's redis-server; tests run one at a time and
// start from an empty database (see newStore).
var server *testenv.Redis

func TestMain(m *testing.M) {
	os.Exit(testenv.WithRedis("redisstore-test-", func(r *testenv.Redis, _ string) int {
		server = r
		return m.Run()
	}))
}

// newStore empties the server and returns a store and a raw client on it.
func newStore(t *testing.T, opts ...redisstore.Option) (*redisstore.Store, *redis.Client) {
	t.Helper()
	server.FlushAll(t)
	c := server.Client(t)
	return redisstore.New(c, opts...), c
}
