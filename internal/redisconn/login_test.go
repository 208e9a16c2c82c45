package redisconn_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/redisconn"
	"github.com/protctl/protctl/internal/testenv"
)

// A user given without a password logs in as that user (AUTH user "",
// which a nopass user accepts), from the URL or from Config.Username;
// go-redis alone would drop it and run as the default user. The default
// user is off on this server, so even the connection's handshake (HELLO,
// SELECT for /2) must run as the user.
func TestUserWithoutPasswordLogsIn(t *testing.T) {
	r := testenv.StartRedis(t, testenv.WithACLUser("other", "other-pw"))
	admin := r.Client(t)
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "limited", "on", "nopass", "resetkeys", "-@all",
		"+ping", "+hello", "+select", "+client|setname", "+acl|whoami").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "haspw", "on", ">secret", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		conf redisconn.Config
	}{
		{"user in the URL", redisconn.Config{URL: "redis://limited@" + r.Addr + "/0"}},
		{"user in the URL, db 2", redisconn.Config{URL: "redis://limited@" + r.Addr + "/2"}},
		{"Username", redisconn.Config{URL: r.URL(), Username: "limited"}},
		{"Username wins over the URL's", redisconn.Config{URL: "redis://other@" + r.Addr + "/0", Username: "limited"}},
		{"client name", redisconn.Config{URL: "redis://limited@" + r.Addr + "/0", ClientName: "protctl-test"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := redisconn.New(tc.conf)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			who, err := c.Do(ctx, "ACL", "WHOAMI").Text()
			if err != nil {
				t.Fatalf("ACL WHOAMI: %v", err)
			}
			if who != "limited" {
				t.Fatalf("the commands ran as %q, want limited", who)
			}
		})
	}

	// A user whose password is not given is refused with the server's
	// reply, a redis.Error as go-redis's own login failures are.
	c, err := redisconn.New(redisconn.Config{URL: "redis://haspw@" + r.Addr + "/0"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.Ping(ctx).Err()
	var rerr redis.Error
	if !errors.As(err, &rerr) || !strings.HasPrefix(err.Error(), "WRONGPASS") {
		t.Fatalf("ping as a user with a password, given none: %v (%T), want a WRONGPASS redis.Error", err, err)
	}
}

// On a cluster every node's connections log in as the user.
func TestUserWithoutPasswordLogsInOnACluster(t *testing.T) {
	cl := testenv.StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, addr := range cl.Addrs() {
		n := redis.NewClient(&redis.Options{Addr: addr})
		err := n.Do(ctx, "ACL", "SETUSER", "limited", "on", "nopass", "~*", "-@all",
			"+ping", "+hello", "+cluster|slots", "+cluster|shards", "+cluster|nodes", "+command", "+acl|whoami", "+get").Err()
		_ = n.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	c, err := redisconn.New(redisconn.Config{URL: "redis://limited@" + cl.Addrs()[0], Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cc := c.(*redis.ClusterClient)
	err = cc.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
		who, err := n.Do(ctx, "ACL", "WHOAMI").Text()
		if err != nil {
			return err
		}
		if who != "limited" {
			return fmt.Errorf("%s: the commands ran as %q, want limited", n.Options().Addr, who)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
