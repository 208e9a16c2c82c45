// Package redisconn builds protctl's Redis clients. It is the one place
// that turns a Redis URL and its credentials into a go-redis client: the
// CLI's factory (and through it the dashboard, the demo and completion)
// and `protctl run node` all call New, so a single server, a Redis
// Cluster and a Sentinel-watched primary are reached the same way
// everywhere, with the same URL syntax, TLS rules and error texts.
//
// The URL chooses the kind of client:
//
//	redis://[user@]host:port/db       one server (rediss:// for TLS)
//	unix://[user@]/path/redis.sock?db=N
//	redis://host:port?addr=host2:port2  a Redis Cluster (or Config.Cluster)
//	redis+sentinel://[user@]s1:26379,s2:26379,s3:26379/MASTER/db
//	                                  the primary that Sentinel names
//	                                  (rediss+sentinel:// for TLS)
//
// A Sentinel URL gives a go-redis failover client, which asks the
// Sentinels for the current primary and follows a failover; it never
// reads from a replica, because a fencing decision (a lease's generation,
// a checkpoint) read from a lagging replica could be stale. Options that
// would route commands to replicas are refused. See
// docs/decisions/0033-redis-sentinel.md.
//
// New does no I/O but reading the TLS files: the first command dials.
package redisconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/config/security"
)

// Sentinel URL schemes. The TLS one turns TLS on for the Sentinels and the
// primary alike (go-redis has one TLS configuration for both).
const (
	SchemeSentinel    = "redis+sentinel"
	SchemeSentinelTLS = "rediss+sentinel"
)

// DefaultSentinelPort is the port of a Sentinel address written without
// one.
const DefaultSentinelPort = "26379"

// Config says how to reach Redis. URL is required; every other field's
// zero value means "not set".
type Config struct {
	// URL names the server(s); see the package doc. It may hold a user
	// and (discouraged) a password: errors never repeat the password.
	URL string
	// Cluster asks for a Redis Cluster client seeded with the URL's host
	// and its addr= parameters (the cluster layout). A Sentinel URL with
	// Cluster is ErrClusterSentinel.
	Cluster bool
	// Username and Password log in to the data servers (the primary with
	// Sentinel); set, they win over the URL's. A user without a password
	// (here or in the URL) logs in with an empty one, as a nopass ACL
	// user may; it is never dropped in favour of the default user.
	Username, Password string
	// TLS adds a CA, a client certificate, a server name: any of them
	// turns TLS on, as rediss:// does. With Sentinel they apply to the
	// Sentinels and the primary alike, each checked against its own host
	// name unless TLS.ServerName is set.
	TLS security.TLS
	// SentinelUsername and SentinelPassword log in to the Sentinels
	// (their ACL is separate from the data servers'). Used only with a
	// Sentinel URL. A user without a password logs in with an empty one,
	// as for the data servers.
	SentinelUsername, SentinelPassword string
	// ClientName names the connections in CLIENT LIST, unless the URL
	// sets client_name.
	ClientName string
	// Timeout bounds the dial, read and write timeouts that the URL does
	// not set (dial_timeout=, read_timeout=, write_timeout=): > 0 is the
	// bound; < 0 means none (reads and writes wait as long as the
	// caller's context lets them); 0 keeps go-redis's defaults.
	Timeout time.Duration
	// PoolSize is the connection pool (per master on a cluster) unless
	// the URL sets pool_size=; 0 keeps go-redis's default (10 per CPU).
	PoolSize int
}

// IsSentinelURL reports whether raw is a redis+sentinel:// or
// rediss+sentinel:// URL.
func IsSentinelURL(raw string) bool {
	scheme, _, ok := strings.Cut(raw, "://")
	if !ok {
		return false
	}
	scheme = strings.ToLower(scheme)
	return scheme == SchemeSentinel || scheme == SchemeSentinelTLS
}

// New builds the client c describes: a failover client for a Sentinel
// URL, a cluster client for Cluster (or addr= seeds), else a single
// server's. It reads the TLS files and dials nothing. Errors wrap
// ErrInvalidURL, ErrClusterSentinel, or name the TLS file that cannot be
// used.
func New(c Config) (redis.UniversalClient, error) {
	if IsSentinelURL(c.URL) {
		o, err := c.failoverOptions()
		if err != nil {
			return nil, err
		}
		if o.SentinelUsername != "" && o.SentinelPassword == "" {
			o.Dialer = sentinelLoginDialer(o)
		}
		fc := redis.NewFailoverClient(o)
		// The login first: its refusal is not a failure to reach the
		// primary, which primaryDialHook would call it.
		if l := newUserLogin(o.Username, o.Password, o.DialTimeout); l != nil {
			fc.AddHook(l)
		}
		fc.AddHook(primaryDialHook{master: o.MasterName})
		return fc, nil
	}
	u, err := parseURL(c.URL)
	if err != nil {
		return nil, err
	}
	tc, err := c.tlsConfig(u.Hostname())
	if err != nil {
		return nil, err
	}
	if c.Cluster || u.Query().Has("addr") {
		o, err := redis.ParseClusterURL(c.URL)
		if err != nil {
			return nil, c.parseError(err)
		}
		c.apply(fields{&o.Username, &o.Password, &o.ClientName, &o.TLSConfig, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolSize, u.Query()}, tc)
		cc := redis.NewClusterClient(o)
		if l := newUserLogin(o.Username, o.Password, o.DialTimeout); l != nil {
			cc.OnNewNode(func(n *redis.Client) { n.AddHook(l) })
		}
		return cc, nil
	}
	o, err := redis.ParseURL(c.URL)
	if err != nil {
		return nil, c.parseError(err)
	}
	c.apply(fields{&o.Username, &o.Password, &o.ClientName, &o.TLSConfig, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolSize, u.Query()}, tc)
	rc := redis.NewClient(o)
	if l := newUserLogin(o.Username, o.Password, o.DialTimeout); l != nil {
		rc.AddHook(l)
	}
	return rc, nil
}

// fields are the go-redis options that c's settings override, in each of
// the three option types (Options, ClusterOptions, FailoverOptions).
type fields struct {
	username, password, clientName *string
	tls                            **tls.Config
	dial, read, write              *time.Duration
	pool                           *int
	// query is the URL's query: a setting it holds wins over c's.
	query url.Values
}

// apply sets c's credentials (over the URL's), tc (when not nil), the
// client name (unless the URL set one), the timeouts (Timeout) and the
// pool (unless the URL set pool_size).
func (c Config) apply(f fields, tc *tls.Config) {
	*f.username, *f.password = or(c.Username, *f.username), or(c.Password, *f.password)
	if tc != nil {
		*f.tls = tc
	}
	*f.clientName = or(*f.clientName, c.ClientName)
	*f.dial, *f.read, *f.write = timeouts(*f.dial, *f.read, *f.write, c.Timeout)
	if c.PoolSize > 0 && !f.query.Has("pool_size") {
		*f.pool = c.PoolSize
	}
}

// Check parses rawURL as New would (with cluster for the cluster layout)
// without reading a file or building a client, so that configuration
// loaders can refuse a bad URL before anything starts: it is the one
// check of a URL's form, whether the URL came from a flag, the
// environment, a contexts file written by hand or by protctl, or a node
// config. Errors are New's.
func Check(rawURL string, cluster bool) error {
	if IsSentinelURL(rawURL) {
		_, err := Config{URL: rawURL, Cluster: cluster}.failoverOptions()
		return err
	}
	u, err := parseURL(rawURL)
	if err != nil {
		return err
	}
	c := Config{URL: rawURL}
	if cluster || u.Query().Has("addr") {
		_, err = redis.ParseClusterURL(rawURL)
	} else {
		_, err = redis.ParseURL(rawURL)
	}
	if err != nil {
		return c.parseError(err)
	}
	return nil
}

// urlForms is what a Redis URL may look like, for error messages.
const urlForms = "want redis://host:port/db, rediss://host:port/db, unix:///path/to/redis.sock or redis+sentinel://host:26379,host:26379/MASTER/db"

// parseURL parses a URL that is not a Sentinel URL and checks its form:
// redis:// or rediss:// with a host (go-redis would quietly dial
// localhost:6379 without one), or unix:// with the socket's path.
func parseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w %s: it does not parse as a URL; %s", ErrInvalidURL, Redact(raw), urlForms)
	}
	switch strings.ToLower(u.Scheme) {
	case "redis", "rediss":
		if u.Host == "" {
			return nil, fmt.Errorf("%w %s: no host; %s", ErrInvalidURL, Redact(raw), urlForms)
		}
	case "unix":
		if u.Path == "" {
			return nil, fmt.Errorf("%w %s: no socket path; %s", ErrInvalidURL, Redact(raw), urlForms)
		}
	default:
		return nil, fmt.Errorf("%w %s: %s", ErrInvalidURL, Redact(raw), urlForms)
	}
	return u, nil
}

// parseError wraps a go-redis parse error, whose text may quote the URL,
// without the URL's password.
func (c Config) parseError(err error) error {
	return fmt.Errorf("%w %s: %s", ErrInvalidURL, Redact(c.URL), redactText(err.Error(), c.URL))
}

func (c Config) tlsConfig(host string) (_ *tls.Config, err error) {
	tc, err := c.TLS.Config(host)
	if err != nil {
		var fe *security.FieldError
		if errors.As(err, &fe) {
			path := map[string]string{"ca": c.TLS.CA, "cert": c.TLS.Cert, "key": c.TLS.Key}[fe.Field]
			return nil, fmt.Errorf("redisconn: Redis TLS %s %s: %w", fe.Field, path, fe.Err)
		}
		return nil, fmt.Errorf("redisconn: Redis TLS: %w", err)
	}
	return tc, nil
}

// SentinelURL is a parsed redis+sentinel:// URL.
type SentinelURL struct {
	// TLS is true for rediss+sentinel://.
	TLS bool
	// User is the primary's user and password from the URL (nil for
	// none): in every protctl URL the user info is the data server's.
	User *url.Userinfo
	// Addrs are the Sentinels, host:port, in the URL's order.
	Addrs []string
	// Master is the name the Sentinels monitor the primary under.
	Master string
	// DB is the database number (0 when the path has none).
	DB int
	// Query holds the go-redis options (dial_timeout=, pool_size=, ...).
	Query url.Values
}

// replicaOptions are go-redis failover options that send commands to
// replicas. protctl never does: a lease's generation or a checkpoint read
// from a replica that has not caught up would let a fenced-off owner
// through.
var replicaOptions = []string{"replica_only", "route_by_latency", "route_by_latency_tolerance", "route_randomly", "use_disconnected_replicas"}

// reservedOptions are query parameters that the URL's own parts spell.
var reservedOptions = map[string]string{
	"addr":        "list every Sentinel in the host part, comma-separated",
	"master_name": "the master name is the path's first segment",
	"db":          "the database is the path's second segment",
	"username":    "the user goes before the @, or in the username setting",
	"password":    "put the password in a password file or the environment",
}

// ParseSentinelURL parses
//
//	redis+sentinel://[user[:password]@]host[:port][,host[:port]...]/MASTER[/DB][?options]
//
// (rediss+sentinel:// for TLS). A Sentinel without a port is on 26379;
// IPv6 addresses are written in brackets. Errors wrap ErrInvalidURL and
// say which part is wrong.
func ParseSentinelURL(raw string) (*SentinelURL, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w %s: %s", ErrInvalidURL, Redact(raw), fmt.Sprintf(format, a...))
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || !IsSentinelURL(raw) {
		return nil, bad("want redis+sentinel:// or rediss+sentinel://")
	}
	s := &SentinelURL{TLS: strings.EqualFold(scheme, SchemeSentinelTLS)}
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		return nil, bad("a URL fragment (#...) means nothing here")
	}
	rest, rawQuery, _ := strings.Cut(rest, "?")
	authority, path, _ := strings.Cut(rest, "/")
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		u, err := url.Parse("redis://" + authority[:i+1] + "x")
		if err != nil {
			return nil, bad("the user part before @ does not parse")
		}
		s.User, authority = u.User, authority[i+1:]
	}
	if strings.TrimSpace(authority) == "" {
		return nil, bad("no Sentinel address: list them as host:port,host:port after //")
	}
	for i, a := range strings.Split(authority, ",") {
		addr, err := sentinelAddr(strings.TrimSpace(a))
		if err != nil {
			return nil, bad("Sentinel address %d of %d %s", i+1, strings.Count(authority, ",")+1, err)
		}
		s.Addrs = append(s.Addrs, addr)
	}
	segs := strings.Split(strings.Trim(path, "/"), "/")
	master, err := url.PathUnescape(segs[0])
	if err != nil {
		return nil, bad("the master name does not parse: %v", err)
	}
	if strings.TrimSpace(master) == "" {
		return nil, bad("no master name: write it after the Sentinels, as in redis+sentinel://host:26379/mymaster/0")
	}
	s.Master = master
	switch len(segs) {
	case 1:
	case 2:
		if s.DB, err = strconv.Atoi(segs[1]); err != nil || s.DB < 0 {
			return nil, bad("invalid database number %q: want /MASTER/DB with DB a number", segs[1])
		}
	default:
		return nil, bad("the path is /MASTER or /MASTER/DB, not %q", "/"+path)
	}
	if s.Query, err = url.ParseQuery(rawQuery); err != nil {
		return nil, bad("the options after ? do not parse: %v", err)
	}
	for _, k := range replicaOptions {
		if s.Query.Has(k) {
			return nil, bad("option %s would send commands to replicas: protctl always talks to the primary, since a lease or checkpoint read from a replica may be stale", k)
		}
	}
	for k, why := range reservedOptions {
		if s.Query.Has(k) {
			return nil, bad("option %s is not accepted: %s", k, why)
		}
	}
	return s, nil
}

// sentinelAddr checks one host[:port] and adds the default port.
func sentinelAddr(a string) (string, error) {
	if a == "" {
		return "", errors.New("is empty (two commas in a row, or a trailing comma?)")
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		// No port: a plain host, or a bracketed IPv6 address.
		h := strings.TrimSuffix(strings.TrimPrefix(a, "["), "]")
		if strings.ContainsAny(h, "[]/") || (strings.Contains(h, ":") && !strings.HasPrefix(a, "[")) {
			return "", fmt.Errorf("%q is not host:port", a)
		}
		host, port = h, DefaultSentinelPort
	}
	if host == "" {
		return "", fmt.Errorf("%q has no host", a)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("%q has an invalid port", a)
	}
	return net.JoinHostPort(host, port), nil
}

// failoverOptions turns c's Sentinel URL into go-redis options. The
// URL's options are parsed by go-redis itself (ParseFailoverURL) so that
// every option it knows keeps its spelling; the user info, the addresses
// and TLS are set here.
func (c Config) failoverOptions() (*redis.FailoverOptions, error) {
	if c.Cluster {
		return nil, fmt.Errorf("%w: %s is a Sentinel URL; use a redis:// URL of the cluster's nodes with the cluster layout, or the protean layout with Sentinel", ErrClusterSentinel, Redact(c.URL))
	}
	s, err := ParseSentinelURL(c.URL)
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	for k, v := range s.Query {
		q[k] = v
	}
	q.Set("master_name", s.Master)
	q["addr"] = s.Addrs[1:]
	// rediss, so that go-redis accepts skip_verify= (applied below).
	scheme := "redis"
	if s.TLS {
		scheme = "rediss"
	}
	plain := (&url.URL{Scheme: scheme, Host: s.Addrs[0], Path: "/" + strconv.Itoa(s.DB), RawQuery: q.Encode()}).String()
	o, err := redis.ParseFailoverURL(plain)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %s", ErrInvalidURL, Redact(c.URL), redactText(err.Error(), c.URL))
	}
	if s.User != nil {
		o.Username = s.User.Username()
		o.Password, _ = s.User.Password()
	}
	o.SentinelUsername, o.SentinelPassword = c.SentinelUsername, c.SentinelPassword
	// The server name is left empty: each connection checks the
	// certificate against the host it dials (a Sentinel, or the primary
	// the Sentinels named), unless TLS.ServerName says otherwise.
	tc, err := c.tlsConfig("")
	if err != nil {
		return nil, err
	}
	if tc == nil && s.TLS {
		tc = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if tc != nil && s.Query.Has("skip_verify") {
		tc.InsecureSkipVerify, _ = strconv.ParseBool(s.Query.Get("skip_verify"))
	}
	// One dial per attempt unless the URL says otherwise: go-redis's
	// dialer retries multiply through the failover client (each dial of
	// the primary asks every Sentinel, each ask dials with its own
	// retries), so that an unreachable Sentinel set took half a minute
	// to report; a command's own retries (max_retries) remain.
	if !s.Query.Has("dialer_retries") {
		o.DialerRetries = 1
	}
	c.apply(fields{&o.Username, &o.Password, &o.ClientName, &o.TLSConfig, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolSize, s.Query}, tc)
	return o, nil
}

// primaryDialHook words a failover client's failure to connect to the
// primary as a *NoPrimaryError (go-redis says "all sentinels specified in
// configuration are unreachable" even when they answered that they know
// no such master).
type primaryDialHook struct{ master string }

// primaryDial marks the context of a dial of the primary (primaryDialHook),
// which goes through the same Dialer as the Sentinels' dials
// (sentinelLoginDialer).
type primaryDial struct{}

func (h primaryDialHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(context.WithValue(ctx, primaryDial{}, true), network, addr)
		if err != nil {
			return nil, newNoPrimaryError(h.master, err)
		}
		return conn, nil
	}
}

func (primaryDialHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// sentinelLoginDialer dials as go-redis does by default and logs each
// connection to a Sentinel in as o.SentinelUsername with an empty password
// (userLogin: AUTH user "", which a nopass user accepts). go-redis sends
// the Sentinels credentials only with a password, so a user given alone
// was dropped and the Sentinels saw the default user. The primary's dials
// go through the same Dialer (go-redis's failover dialer calls it with the
// address the Sentinels named): primaryDialHook marks them, and they are
// left to the data servers' own login.
func sentinelLoginDialer(o *redis.FailoverOptions) func(ctx context.Context, network, addr string) (net.Conn, error) {
	timeout := o.DialTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second // go-redis's default dial timeout
	}
	base := redis.NewDialer(&redis.Options{DialTimeout: timeout, TLSConfig: o.TLSConfig})
	l := newUserLogin(o.SentinelUsername, "", timeout)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := base(ctx, network, addr)
		if err != nil || ctx.Value(primaryDial{}) != nil {
			return conn, err
		}
		if err := l.login(ctx, conn); err != nil {
			_ = conn.Close()
			return nil, err
		}
		return conn, nil
	}
}

func (primaryDialHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// timeouts applies d to the dial, read and write timeouts the URL did not
// set (Config.Timeout). go-redis spells "no timeout" -1 for reads and
// writes; a dial always has one (go-redis's default when d is not > 0).
func timeouts(dial, read, write, d time.Duration) (time.Duration, time.Duration, time.Duration) {
	if d == 0 {
		return dial, read, write
	}
	rw := d
	if d < 0 {
		rw = -1
	}
	if dial == 0 && d > 0 {
		dial = d
	}
	if read == 0 {
		read = rw
	}
	if write == 0 {
		write = rw
	}
	return dial, read, write
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Redact hides the password of a URL's user info ("redis://u:xxxxx@h"),
// Sentinel URLs with an address list included. Strings that do not parse
// are replaced entirely, since they might hold a password in a place we
// cannot find.
func Redact(raw string) string {
	if IsSentinelURL(raw) {
		scheme, rest, _ := strings.Cut(raw, "://")
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		if i := strings.LastIndexByte(rest[:end], '@'); i >= 0 {
			u, err := url.Parse("redis://" + rest[:i+1] + "x")
			if err != nil {
				return "<unparsable URL>"
			}
			if _, ok := u.User.Password(); ok {
				return scheme + "://" + url.UserPassword(u.User.Username(), "xxxxx").String() + rest[i:]
			}
		}
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable URL>"
	}
	return u.Redacted()
}

// redactText removes the password of rawURL from msg.
func redactText(msg, rawURL string) string {
	pw := ""
	if IsSentinelURL(rawURL) {
		if s, err := ParseSentinelURL(rawURL); err == nil && s.User != nil {
			pw, _ = s.User.Password()
		} else if err != nil {
			return msg
		}
	} else if u, err := url.Parse(rawURL); err == nil && u.User != nil {
		pw, _ = u.User.Password()
	}
	if pw == "" {
		return msg
	}
	return strings.ReplaceAll(msg, pw, "xxxxx")
}
