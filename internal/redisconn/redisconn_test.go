package redisconn_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/config/security"
	"github.com/protctl/protctl/internal/redisconn"
)

func TestParseSentinelURL(t *testing.T) {
	for _, tc := range []struct {
		name, url string
		want      redisconn.SentinelURL
	}{
		{"three sentinels, db", "redis+sentinel://s1:26379,s2:26380,s3:26381/mymaster/2",
			redisconn.SentinelURL{Addrs: []string{"s1:26379", "s2:26380", "s3:26381"}, Master: "mymaster", DB: 2}},
		{"default port, no db", "redis+sentinel://s1,10.0.0.2/m",
			redisconn.SentinelURL{Addrs: []string{"s1:26379", "10.0.0.2:26379"}, Master: "m"}},
		{"IPv6", "rediss+sentinel://[::1]:26379,[fe80::1]/m/0",
			redisconn.SentinelURL{TLS: true, Addrs: []string{"[::1]:26379", "[fe80::1]:26379"}, Master: "m"}},
		{"spaces around addresses", "redis+sentinel://s1:1, s2:2/m",
			redisconn.SentinelURL{Addrs: []string{"s1:1", "s2:2"}, Master: "m"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := redisconn.ParseSentinelURL(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, *got, cmpopts.IgnoreFields(redisconn.SentinelURL{}, "Query", "User")); diff != "" {
				t.Fatalf("ParseSentinelURL(%q) (-want +got):\n%s", tc.url, diff)
			}
		})
	}
}

// Every bad Sentinel URL is ErrInvalidURL with a message naming what is
// wrong, and never the password.
func TestSentinelURLErrors(t *testing.T) {
	const secret = "s3cret-pw"
	for _, tc := range []struct{ name, url, want string }{
		{"no master name", "redis+sentinel://s1:26379", "no master name"},
		{"no master name, slash", "redis+sentinel://s1:26379/", "no master name"},
		{"empty address", "redis+sentinel://s1:26379,,s2:26379/m", "address 2 of 3 is empty"},
		{"trailing comma", "redis+sentinel://s1:26379,/m", "address 2 of 2 is empty"},
		{"no address", "redis+sentinel:///m", "no Sentinel address"},
		{"bad port", "redis+sentinel://s1:x/m", "invalid port"},
		{"bad db", "redis+sentinel://s1/m/x", "invalid database number"},
		{"extra path", "redis+sentinel://s1/m/0/1", "the path is /MASTER or /MASTER/DB"},
		{"replica reads", "redis+sentinel://s1/m?replica_only=true", "replica_only would send commands to replicas"},
		{"route randomly", "redis+sentinel://s1/m?route_randomly=true", "route_randomly"},
		{"addr option", "redis+sentinel://s1/m?addr=s2:1", "option addr"},
		{"unknown option", "redis+sentinel://s1/m?bogus=1", "unexpected option: bogus"},
		{"password in error", "redis+sentinel://u:" + secret + "@s1,,s2/m", "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := redisconn.Check(tc.url, false)
			if !errors.Is(err, redisconn.ErrInvalidURL) {
				t.Fatalf("err %v, want ErrInvalidURL", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %q, want it to say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("the password is in %q", err)
			}
			if _, err := redisconn.New(redisconn.Config{URL: tc.url}); !errors.Is(err, redisconn.ErrInvalidURL) {
				t.Fatalf("New: %v", err)
			}
		})
	}
	t.Run("cluster", func(t *testing.T) {
		err := redisconn.Check("redis+sentinel://s1/m", true)
		if !errors.Is(err, redisconn.ErrClusterSentinel) {
			t.Fatalf("err %v", err)
		}
	})
}

// A Sentinel URL builds a failover client on the primary: the URL's user
// and the Config's credentials go to the primary, the Sentinel ones to
// the Sentinels, and the URL's options are go-redis's.
func TestNewSentinel(t *testing.T) {
	c, err := redisconn.New(redisconn.Config{
		URL:              "rediss+sentinel://app@s1:26379,s2:26379/mymaster/3?dial_timeout=2s&pool_size=7",
		Password:         "primary-pw",
		SentinelUsername: "sent",
		SentinelPassword: "sent-pw",
		ClientName:       "protctl-test",
		Timeout:          -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, ok := c.(*redis.Client)
	if !ok {
		t.Fatalf("got %T, want the failover *redis.Client", c)
	}
	o := rc.Options()
	if o.Addr != "FailoverClient" {
		t.Fatalf("Addr %q: not a failover client", o.Addr)
	}
	got := struct {
		DB                int
		User, Pass, Name  string
		Pool              int
		Dial, Read, Write time.Duration
		TLS               bool
		ServerName        string
	}{o.DB, o.Username, o.Password, o.ClientName, o.PoolSize, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.TLSConfig != nil, ""}
	if o.TLSConfig != nil {
		got.ServerName = o.TLSConfig.ServerName
	}
	want := got
	want.DB, want.User, want.Pass, want.Name, want.Pool = 3, "app", "primary-pw", "protctl-test", 7
	// Timeout -1: no read or write timeout, which an initialised
	// go-redis Options spells 0.
	want.Dial, want.Read, want.Write, want.TLS, want.ServerName = 2*time.Second, 0, 0, true, ""
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("failover client options (-want +got):\n%s", diff)
	}
}

// skip_verify= is go-redis's option for TLS URLs, Sentinel ones too.
func TestSentinelSkipVerify(t *testing.T) {
	c, err := redisconn.New(redisconn.Config{URL: "rediss+sentinel://s1/m?skip_verify=true"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if tc := c.(*redis.Client).Options().TLSConfig; tc == nil || !tc.InsecureSkipVerify || tc.ServerName != "" {
		t.Fatalf("TLS config %+v", tc)
	}
	if err := redisconn.Check("redis+sentinel://s1/m?skip_verify=true", false); err == nil {
		t.Fatal("skip_verify without TLS should be refused as go-redis refuses it")
	}
}

func TestNewSingleAndCluster(t *testing.T) {
	c, err := redisconn.New(redisconn.Config{URL: "redis://u:urlpw@h:6380/1", Username: "ops", ClientName: "x", Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	o := c.(*redis.Client).Options()
	c.Close()
	if o.Addr != "h:6380" || o.DB != 1 || o.Username != "ops" || o.Password != "urlpw" || o.ClientName != "x" || o.ReadTimeout != 3*time.Second {
		t.Fatalf("options %+v", o)
	}
	c, err = redisconn.New(redisconn.Config{URL: "unix:///tmp/r.sock?db=2"})
	if err != nil {
		t.Fatal(err)
	}
	o = c.(*redis.Client).Options()
	c.Close()
	if o.Network != "unix" || o.Addr != "/tmp/r.sock" || o.DB != 2 {
		t.Fatalf("unix options %+v", o)
	}
	c, err = redisconn.New(redisconn.Config{URL: "redis://h1:7000?addr=h2:7001"})
	if err != nil {
		t.Fatal(err)
	}
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("addr= seeds: got %T", c)
	}
	if got := strings.Join(cc.Options().Addrs, ","); got != "h1:7000,h2:7001" {
		t.Fatalf("seeds %s", got)
	}
	cc.Close()
	if _, err := redisconn.New(redisconn.Config{URL: "redis://h/0", TLS: securityCA("/nonexistent/ca.pem")}); err == nil || !strings.Contains(err.Error(), "/nonexistent/ca.pem") {
		t.Fatalf("a missing CA: %v", err)
	}
}

func TestRedact(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://u:pw@h:1/0":                      "redis://u:xxxxx@h:1/0",
		"redis+sentinel://u:pw@s1:1,s2:2/m/0?a=b": "redis+sentinel://u:xxxxx@s1:1,s2:2/m/0?a=b",
		"redis+sentinel://[::1]:1,[::2]:2/m":      "redis+sentinel://[::1]:1,[::2]:2/m",
		"rediss+sentinel://:pw@[::1]:1,[::2]:2/m": "rediss+sentinel://:xxxxx@[::1]:1,[::2]:2/m",
		"redis://h:1/0":                           "redis://h:1/0",
	} {
		if got := redisconn.Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q, want %q", raw, got, want)
		}
	}
}

func securityCA(path string) security.TLS { return security.TLS{CA: path} }
