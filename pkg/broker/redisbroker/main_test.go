package redisbroker_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// server is the package's redis-server; tests run one at a time and
// start from an empty database (see newBroker).
var server *testenv.Redis

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "redisbroker-test-")
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

// newBroker empties the server and returns a broker and a raw client on it.
func newBroker(t *testing.T, opts ...redisbroker.Option) (*redisbroker.Broker, *redis.Client) {
	t.Helper()
	server.FlushAll(t)
	c := server.Client(t)
	return redisbroker.New(c, opts...), c
}

const (
	cat   = "shop::order"
	key   = "o-1"
	group = "app.handlers.Projector"
	owner = "node-a"
)

var layout = broker.ProteanLayout
