package runtime_test

import (
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// Three node processes (testnode -cluster ... -layout cluster) share 60
// keys, whose partitions hash over all three masters of a real Redis
// Cluster, while publishers run; one process is killed with SIGKILL
// mid-run. Per-key order holds, nothing is lost or left unacked, no two
// processes are ever inside the handler for one key at once, and the
// survivors take the dead node's keys. The takeover time is measured and
// logged; the design's bound is lease TTL + renewal period, asserted
// only as eventual takeover here (a cluster of three redis-servers and
// three node processes on a shared CI machine makes a tight timed check
// flaky; TestRedisSIGKILLFailover checks the bound on one server).
func TestClusterSIGKILLFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs node processes on a Redis Cluster")
	}
	bin := buildTestNode(t)
	e := newClusterEnv(t)
	keys := keyNames(60)
	spread := map[int]bool{}
	for _, k := range keys {
		spread[e.masterOf(broker.ClusterLayout.Stream(cat, k))] = true
	}
	if len(spread) != len(e.cl.Masters) {
		t.Fatalf("keys on %d masters, want %d", len(spread), len(e.cl.Masters))
	}
	runKillFailover(t, bin, killRun{
		nodeArgs:   []string{"-cluster", strings.Join(e.cl.Addrs(), ","), "-layout", "cluster"},
		c:          e.c,
		pub:        e.pub,
		store:      redisstore.New(e.c),
		layout:     broker.ClusterLayout,
		keys:       keys,
		publishers: 4,
		ttl:        2 * time.Second,
		renew:      400 * time.Millisecond,
	})
}
