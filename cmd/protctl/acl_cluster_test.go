//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/acl"
	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
)

// TestACLClusterLayout creates the cluster layout's users on every master
// of a real 3-master Redis Cluster (from the printed lines) and runs the
// CLI's cluster client as them: readonly lists, shows and plans but its
// release and reap exit 3 with "permission denied" and change nothing;
// the operator's release and reap succeed.
func TestACLClusterLayout(t *testing.T) {
	ctx := context.Background()
	cl := testenv.StartCluster(t)
	c := cl.Client(t)
	l := broker.ClusterLayout
	b := redisbroker.New(c, redisbroker.WithLayout(l))
	const cat, grp = "shop::order", "projector"
	for i := range 12 {
		if _, err := b.PublishPartitioned(ctx, cat, fmt.Sprintf("o-%d", i), "", []byte(`{"data":{}}`)); err != nil {
			t.Fatal(err)
		}
	}
	// o-0: leased, its head pending; o-1: read and acked, no lease (cold).
	lease, ok, err := b.AcquirePartitionLease(ctx, l.LeaseKey(grp, "o-0"), l.GenerationKey(grp, "o-0"), "node-a", time.Minute)
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	if _, err := b.AckAndReadPartitionFenced(ctx, lease.Fence, l.Stream(cat, "o-0"), grp, nil, 1, broker.ReadPendingThenNew); err != nil {
		t.Fatal(err)
	}
	cold, ok, err := b.AcquirePartitionLease(ctx, l.LeaseKey(grp, "o-1"), l.GenerationKey(grp, "o-1"), "node-a", time.Minute)
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	msgs, err := b.AckAndReadPartitionFenced(ctx, cold.Fence, l.Stream(cat, "o-1"), grp, nil, 10, broker.ReadPendingThenNew)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("read o-1: %v %v", msgs, err)
	}
	if _, err := b.AckPartitionFenced(ctx, cold.Fence, l.Stream(cat, "o-1"), grp, msgs[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ReleasePartitionLease(ctx, cold.Fence); err != nil {
		t.Fatal(err)
	}

	users, passwords := map[acl.Role]string{}, map[acl.Role]string{}
	for _, role := range []acl.Role{acl.ReadOnly, acl.Operator} {
		for i, m := range cl.Masters {
			node := redis.NewClient(&redis.Options{Addr: m.Addr})
			u, pw := createACLUser(t, node, role, "--layout", "cluster")
			_ = node.Close()
			if i > 0 && u == users[role] {
				// Same user, same password on every master.
				node := redis.NewClient(&redis.Options{Addr: m.Addr})
				err := node.Do(ctx, "ACL", "SETUSER", u, "resetpass", ">"+passwords[role]).Err()
				_ = node.Close()
				if err != nil {
					t.Fatal(err)
				}
				continue
			}
			users[role], passwords[role] = u, pw
		}
	}
	url := "redis://" + cl.Masters[len(cl.Masters)-1].Addr
	as := func(role acl.Role, args ...string) result {
		t.Helper()
		cli := newCLI(t)
		cli.env["PROTCTL_REDIS_USERNAME"] = users[role]
		cli.env["PROTCTL_REDIS_PASSWORD"] = passwords[role]
		r := cli.run(append(args, "--layout", "cluster", "--redis", url, "-vv")...)
		noPassword(t, passwords, r.stdout+r.stderr)
		return r
	}
	leaseOf := func(key string) string {
		v, _ := c.Get(ctx, l.LeaseKey(grp, key)).Result()
		return v
	}

	for _, args := range [][]string{
		{"partitions", "ls", cat, "-o", "json"},
		{"partitions", "ls", "-o", "json"}, // scans every master
		{"partitions", "show", cat, "o-0", "-o", "json"},
		{"leases", "ls", "--category", cat, "-o", "json"},
		{"partitions", "release", cat, "o-0", "--group", grp, "--force", "--dry-run"},
		{"partitions", "reap", cat, "o-1", "--min-idle", "0s", "--dry-run"},
	} {
		r := as(acl.ReadOnly, args...)
		if r.code != 0 {
			t.Fatalf("readonly %s: exit %d\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
		if !strings.Contains(r.stdout, "o-") {
			t.Fatalf("readonly %s printed no partition:\n%s", strings.Join(args, " "), r.stdout)
		}
	}

	repairs := [][]string{
		{"partitions", "release", cat, "o-0", "--group", grp, "--force", "--yes"},
		{"partitions", "reap", cat, "o-1", "--min-idle", "0s", "--yes"},
	}
	for _, args := range repairs {
		r := as(acl.ReadOnly, args...)
		r.wantCode(t, clierr.ExitUnavailable)
		if !strings.Contains(r.stderr, "permission denied") {
			t.Fatalf("readonly %s:\n%s", strings.Join(args, " "), r.stderr)
		}
	}
	if leaseOf("o-0") != lease.Fence.Token {
		t.Fatalf("the readonly release changed the lease to %q", leaseOf("o-0"))
	}
	if n, _ := c.Exists(ctx, l.Stream(cat, "o-1")).Result(); n != 1 {
		t.Fatal("the readonly reap deleted o-1")
	}
	if ok, _ := c.SIsMember(ctx, l.IndexKey(cat), "o-1").Result(); !ok {
		t.Fatal("the readonly reap left o-1 out of the index")
	}

	for _, args := range repairs {
		as(acl.Operator, args...).wantCode(t, 0)
	}
	if leaseOf("o-0") != "" {
		t.Fatalf("lease of o-0 still %q", leaseOf("o-0"))
	}
	if n, _ := c.Exists(ctx, l.Stream(cat, "o-1")).Result(); n != 0 {
		t.Fatal("the operator's reap left o-1")
	}
}

// TestACLClusterNodeRole runs `protctl run node` with the cluster layout
// on a real 3-master Redis Cluster as the node user of the cluster
// layout's rules (created on every master from the printed line): a
// publisher under the same user appends to partitions on every master,
// the node handles every event and acks it, with no refusal in its logs.
func TestACLClusterNodeRole(t *testing.T) {
	ctx := context.Background()
	cl := testenv.StartCluster(t)
	c := cl.Client(t)
	var user, pw string
	for i, m := range cl.Masters {
		node := redis.NewClient(&redis.Options{Addr: m.Addr})
		if i == 0 {
			user, pw = createACLUser(t, node, acl.Node, "--layout", "cluster")
		} else {
			createACLUser(t, node, acl.Node, "--layout", "cluster")
			if err := node.Do(ctx, "ACL", "SETUSER", user, "resetpass", ">"+pw).Err(); err != nil {
				t.Fatal(err)
			}
		}
		_ = node.Close()
	}
	dir := t.TempDir()
	pwFile := dir + "/node.password"
	writeFile(t, pwFile, pw+"\n")
	script := dir + "/handler.sh"
	writeFile(t, script, aclHandlerScript)
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	record := dir + "/record.txt"
	path := dir + "/node.yaml"
	writeFile(t, path, fmt.Sprintf(`service: %s
node: node-acl
redis: {url: "redis://%s", layout: cluster, username: "%s", passwordFile: "%s"}
admin: {listen: "127.0.0.1:0"}
lease: {ttl: %s, renewEvery: %s}
drain: {timeout: 10s}
subscriptions:
  - name: %s
    redis: {categories: ["%s"]}
    handler:
      exec:
        command: ["%s"]
        timeout: 30s
        env: {RECORD: "%s"}
`, procService, cl.Masters[0].Addr, user, pwFile, procTTL, procRenew, procGroup, procCategory, script, record))
	logs := &procOutput{}
	stop := startACLNode(t, path, logs)

	nodeClient := cl.NewClient(&redis.ClusterOptions{Username: user, Password: pw})
	defer nodeClient.Close()
	pub, err := partitioned.NewPublisher(redisbroker.New(nodeClient, redisbroker.WithLayout(broker.ClusterLayout)))
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"k-a", "k-b", "k-c", "k-d", "k-e", "k-f"}
	for seq := 1; seq <= 2; seq++ {
		for _, k := range keys {
			env := fmt.Sprintf(`{"data":{"key":"%s","seq":%d},"metadata":{"headers":{"id":"%s-%d","type":"T"}}}`, k, seq, k, seq)
			if _, err := pub.Publish(ctx, procCategory, k, []byte(env)); err != nil {
				t.Fatalf("publish as the node user: %v", err)
			}
		}
	}
	testenv.Eventually(t, 60*time.Second, "every event handled", func() (bool, string) {
		b, _ := os.ReadFile(record)
		n := strings.Count(string(b), "\n")
		return n >= 2*len(keys), fmt.Sprintf("%d of %d handled", n, 2*len(keys))
	})
	for _, k := range keys {
		stream := broker.ClusterLayout.Stream(procCategory, k)
		testenv.Eventually(t, 30*time.Second, stream+" acked", func() (bool, string) {
			p, err := c.XPending(ctx, stream, procGroup).Result()
			return err == nil && p.Count == 0, fmt.Sprintf("pending %+v, err %v", p, err)
		})
	}
	if err := stop(); err != nil {
		t.Fatalf("drain: %v", err)
	}
	noPassword(t, map[acl.Role]string{acl.Node: pw}, logs.String())
	if r := refusals(logs.String()); len(r) > 0 {
		t.Fatalf("the node was refused something:\n%s\n\nwhole log:\n%s", strings.Join(r, "\n"), logs.String())
	}
}
