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

// The Sentinels' own user given without a password logs in to the
// Sentinels as that user (AUTH user ""): go-redis alone sent the
// Sentinels no credentials, and they saw the default user. The default
// user is off on the Sentinels here, so only the login reaches the
// primary; the primary's own connections keep their own (default) user.
func TestSentinelUserWithoutAPassword(t *testing.T) {
	s := testenv.StartSentinel(t)
	ctx := context.Background()
	for _, p := range s.Sentinels {
		sc := redis.NewClient(&redis.Options{Addr: p.Addr})
		for _, args := range [][]any{
			{"ACL", "SETUSER", "watcher", "on", "nopass", "+@all"},
			{"ACL", "SETUSER", "default", "off"},
		} {
			if err := sc.Do(ctx, args...).Err(); err != nil {
				_ = sc.Close()
				t.Fatalf("sentinel %s: %v: %v", p.Addr, args, err)
			}
		}
		_ = sc.Close()
	}
	for _, tc := range []struct {
		user string
		ok   bool
	}{{"watcher", true}, {"", false}, {"nobody", false}} {
		t.Run(fmt.Sprintf("user %q", tc.user), func(t *testing.T) {
			c, err := redisconn.New(redisconn.Config{URL: s.URL(), SentinelUsername: tc.user, Timeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			err = c.Set(ctx, "k", "v", 0).Err()
			if tc.ok && err != nil {
				t.Fatalf("SET through the Sentinels as %q: %v", tc.user, err)
			}
			if !tc.ok && err == nil {
				t.Fatalf("SET through the Sentinels as %q worked; the default user is off there", tc.user)
			}
			if tc.ok {
				who, err := c.Do(ctx, "ACL", "WHOAMI").Text()
				if err != nil || who != "default" {
					t.Fatalf("the primary's connection is user %q (%v), want default: the Sentinels' user leaked to it", who, err)
				}
			}
		})
	}
}
