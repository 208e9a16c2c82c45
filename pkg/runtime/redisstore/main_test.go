package redisstore_test

import (
	"fmt"
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
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "redisstore-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	server, err = testenv.NewRedis(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer server.Stop()
	return m.Run()
}

// newStore empties the server and returns a store and a raw client on it.
func newStore(t *testing.T, opts ...redisstore.Option) (*redisstore.Store, *redis.Client) {
	t.Helper()
	server.FlushAll(t)
	c := server.Client(t)
	return redisstore.New(c, opts...), c
}
