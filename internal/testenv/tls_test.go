package testenv_test

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
)

func pingWith(o *redis.Options) error {
	o.MaxRetries = -1
	o.DialTimeout = 2 * time.Second
	c := redis.NewClient(o)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// A TLS server with an ACL user: testenv's own client and the ACL user over
// TLS get in; plain TCP, an untrusted CA and the default user do not.
func TestStartRedisTLSWithACLUser(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.WithTLS(), testenv.WithACLUser("alice", "tls-acl-secret", "~*", "+@all"))
	if !strings.HasPrefix(srv.URL(), "rediss://127.0.0.1:") {
		t.Fatalf("URL() = %s, want rediss://127.0.0.1:port/0", srv.URL())
	}
	if err := srv.Client(t).Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatalf("testenv's client over TLS: %v", err)
	}

	opts, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	opts.Username, opts.Password = "alice", "tls-acl-secret"
	opts.TLSConfig = &tls.Config{RootCAs: srv.TLS.ClientTLS().RootCAs, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if err := pingWith(opts); err != nil {
		t.Fatalf("alice over TLS trusting the CA (no client certificate): %v", err)
	}

	cases := map[string]*redis.Options{
		"plain TCP":      {Addr: srv.Addr, Username: "alice", Password: "tls-acl-secret"},
		"another CA":     {Addr: srv.Addr, Username: "alice", Password: "tls-acl-secret", TLSConfig: testenv.NewPKI(t).ClientTLS()},
		"default user":   {Addr: srv.Addr, TLSConfig: srv.TLS.ClientTLS()},
		"wrong password": {Addr: srv.Addr, Username: "alice", Password: "nope", TLSConfig: srv.TLS.ClientTLS()},
	}
	for name, o := range cases {
		if err := pingWith(o); err == nil {
			t.Errorf("%s: PING succeeded", name)
		}
	}

	// A restart keeps TLS and the users.
	if err := srv.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if err := pingWith(opts); err != nil {
		t.Fatalf("alice after a restart: %v", err)
	}
}

// With --tls-auth-clients yes a client needs the client certificate.
func TestStartRedisTLSClientAuth(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.WithTLSClientAuth())
	if err := pingWith(&redis.Options{Addr: srv.Addr, TLSConfig: srv.TLS.ClientTLS()}); err != nil {
		t.Fatalf("with the client certificate: %v", err)
	}
	noCert := &tls.Config{RootCAs: srv.TLS.ClientTLS().RootCAs, MinVersion: tls.VersionTLS12}
	if err := pingWith(&redis.Options{Addr: srv.Addr, TLSConfig: noCert}); err == nil {
		t.Fatal("without a client certificate: PING succeeded")
	}
}
