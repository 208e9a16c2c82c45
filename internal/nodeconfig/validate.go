package nodeconfig

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/admin"
	"github.com/protctl/protctl/internal/config/security"
	"github.com/protctl/protctl/internal/handlers"
	"github.com/protctl/protctl/internal/redisconn"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// validator checks a decoded Config, fills in its defaults, resolves
// relative paths against the config's directory and reads the secrets.
type validator struct {
	c        *Config
	lines    map[string]int
	getenv   func(string) string
	dir      string
	problems []Problem
}

func (v *validator) add(path, format string, a ...any) {
	v.problems = append(v.problems, Problem{Field: path, Line: v.line(path), Msg: fmt.Sprintf(format, a...)})
}

// line is the line of path, or of its nearest ancestor that was in the
// file.
func (v *validator) line(path string) int {
	for path != "" {
		if l, ok := v.lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

func (v *validator) run() {
	c := v.c
	v.service()
	v.redis()
	v.kafka()
	v.admin()
	v.lease()
	if c.Drain.Timeout == 0 {
		c.Drain.Timeout = Duration(DefaultDrainTimeout)
	}
	v.handlerLimits()
	v.subscriptions()
}

// sortProblems puts problems in file order, those of fields absent from
// the file (line 0) last.
func sortProblems(problems []Problem) {
	slices.SortStableFunc(problems, func(a, b Problem) int {
		la, lb := a.Line, b.Line
		if la == 0 {
			la = math.MaxInt
		}
		if lb == 0 {
			lb = math.MaxInt
		}
		return cmp.Compare(la, lb)
	})
}

func (v *validator) service() {
	c := v.c
	if c.Service == "" {
		v.add("service", "is required")
	} else if err := (redisstore.LeaseGroup{Service: c.Service, Name: "x"}).Validate(); err != nil {
		v.add("service", "%q cannot be used in key names: it must not contain '|', '{' or '}'", c.Service)
	}
	if c.Node == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "node"
		}
		c.Node = host + "-" + strconv.Itoa(os.Getpid())
	} else if strings.ContainsAny(c.Node, " \t\r\n{}") {
		v.add("node", "%q must not contain spaces or braces", c.Node)
	}
}

// path resolves a file name against the config's directory.
func (v *validator) path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(v.dir, p)
}

// secret reads a secret from env or the file at field; "" with no
// problem when neither is set.
func (v *validator) secret(env string, file *string, field string) string {
	if s := v.getenv(env); s != "" {
		return s
	}
	if *file == "" {
		return ""
	}
	*file = v.path(*file)
	s, err := security.ReadSecretFile(*file)
	if err != nil {
		v.add(field, "cannot read: %v", err)
		return ""
	}
	if s == "" {
		v.add(field, "%s is empty", *file)
	}
	return s
}

func (v *validator) redis() {
	r := &v.c.Redis
	if r.Layout == "" {
		r.Layout = DefaultLayout
	}
	layout, err := broker.ParseLayout(r.Layout)
	if err != nil {
		v.add("redis.layout", "want protean or cluster, got %q", r.Layout)
	}
	sentinel := redisconn.IsSentinelURL(r.URL)
	switch {
	case r.URL == "":
		v.add("redis.url", "is required (e.g. redis://127.0.0.1:6379/0)")
	case sentinel:
		v.sentinel(r, layout)
	default:
		var opts *redis.Options
		var perr error
		if layout.IsCluster() {
			_, perr = redis.ParseClusterURL(r.URL)
		} else {
			opts, perr = redis.ParseURL(r.URL)
		}
		if perr != nil {
			v.add("redis.url", "invalid Redis URL %s: %s", RedactURL(r.URL), redact(perr.Error(), r.URL))
		} else if opts != nil && opts.Password != "" {
			r.Password = opts.Password
		}
		if u, err := url.Parse(r.URL); err == nil && perr == nil {
			if pw, ok := u.User.Password(); ok && pw != "" {
				r.Password = pw
			}
		}
	}
	if pw := v.secret(EnvRedisPassword, &r.PasswordFile, "redis.passwordFile"); pw != "" {
		r.Password = pw
	}
	if !sentinel && r.Sentinel != (RedisSentinel{}) {
		v.add("redis.sentinel", "Sentinel credentials need a redis+sentinel:// redis.url (e.g. redis+sentinel://s1:26379,s2:26379,s3:26379/mymaster/0)")
	}
	v.tls(&r.TLS, "redis.tls")
}

// sentinel checks a redis+sentinel:// URL and reads the Sentinels'
// password.
func (v *validator) sentinel(r *Redis, layout broker.Layout) {
	if layout.IsCluster() {
		v.add("redis.layout", "cluster cannot be used with a redis+sentinel:// redis.url: Redis Cluster fails over by itself; use protean with Sentinel")
	}
	// Check parses the URL and go-redis's options after it; its errors
	// name the part that is wrong and never the password.
	if err := redisconn.Check(r.URL, false); err != nil {
		v.add("redis.url", "%s", strings.TrimPrefix(err.Error(), redisconn.ErrInvalidURL.Error()+" "))
	} else if su, err := redisconn.ParseSentinelURL(r.URL); err == nil {
		if pw, ok := su.User.Password(); ok && pw != "" {
			r.Password = pw
		}
	}
	s := &r.Sentinel
	s.Password = v.secret(EnvRedisSentinelPassword, &s.PasswordFile, "redis.sentinel.passwordFile")
}

func (v *validator) tls(t *TLS, path string) {
	t.CA, t.Cert, t.Key = v.path(t.CA), v.path(t.Cert), v.path(t.Key)
	if (t.Cert == "") != (t.Key == "") {
		v.add(path, "cert and key go together: set both or neither")
		return
	}
	if _, err := t.Config(""); err != nil {
		var fe *security.FieldError
		if errors.As(err, &fe) {
			v.add(path+"."+fe.Field, "%v", fe.Err)
		} else {
			v.add(path, "%v", err)
		}
	}
}

func (v *validator) kafka() {
	k := v.c.Kafka
	if k == nil {
		return
	}
	if len(k.Brokers) == 0 {
		v.add("kafka.brokers", "at least one host:port is required")
	}
	for i, b := range k.Brokers {
		if _, port, err := net.SplitHostPort(b); err != nil || port == "" {
			v.add(fmt.Sprintf("kafka.brokers[%d]", i), "want host:port, got %q", b)
		}
	}
	if k.ClientID == "" {
		k.ClientID = "protctl"
	}
	if n := k.FetchMaxPartitionBytes; n < 0 || n > math.MaxInt32 {
		v.add("kafka.fetchMaxPartitionBytes", "want 1 to %d bytes (or 0 for the default), got %d", math.MaxInt32, n)
	}
	v.tls(&k.TLS, "kafka.tls")
	if s := k.SASL; s != nil {
		if m, err := security.ParseMechanism(s.Mechanism); err != nil {
			v.add("kafka.sasl.mechanism", "%v", err)
		} else {
			s.Mechanism = m
		}
		if s.Username == "" {
			v.add("kafka.sasl.username", "is required")
		}
		s.Password = v.secret(EnvKafkaPassword, &s.PasswordFile, "kafka.sasl.passwordFile")
		if s.Password == "" && s.PasswordFile == "" {
			v.add("kafka.sasl.passwordFile", "a password is required: set %s or kafka.sasl.passwordFile", EnvKafkaPassword)
		}
	}
}

func (v *validator) admin() {
	a := &v.c.Admin
	if a.Listen == "" {
		a.Listen = DefaultAdminListen
	}
	a.Token = v.secret(EnvAdminToken, &a.TokenFile, "admin.tokenFile")
	if a.Disabled {
		return
	}
	host, port, err := net.SplitHostPort(a.Listen)
	if err != nil {
		v.add("admin.listen", "want host:port, got %q", a.Listen)
		return
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		v.add("admin.listen", "invalid port %q", port)
		return
	}
	if !IsLoopback(host) && a.Token == "" {
		v.add("admin.tokenFile", "a token is required when admin.listen (%s) is not a loopback address: set %s or admin.tokenFile", a.Listen, EnvAdminToken)
	}
}

// IsLoopback reports whether host only ever means this machine (see
// admin.IsLoopback, which enforces the same rule when it listens).
func IsLoopback(host string) bool { return admin.IsLoopback(host) }

func (v *validator) lease() {
	l := &v.c.Lease
	if l.TTL == 0 {
		l.TTL = Duration(DefaultLeaseTTL)
	}
	if l.RenewEvery == 0 {
		l.RenewEvery = l.TTL / 5
	}
	if l.TTL.D() < 100*time.Millisecond {
		v.add("lease.ttl", "must be at least 100ms, got %s", l.TTL)
		return
	}
	if 2*l.RenewEvery >= l.TTL {
		v.add("lease.renewEvery", "must be less than half of lease.ttl (%s), got %s", l.TTL, l.RenewEvery)
	}
	switch {
	case l.WaitReplicas < 0:
		v.add("lease.waitReplicas", "must not be negative, got %d (0: no WAIT)", l.WaitReplicas)
	case l.WaitReplicas == 0 && l.WaitTimeout != 0:
		v.add("lease.waitTimeout", "needs lease.waitReplicas (the replicas to wait for); without it no lease write waits")
	case l.WaitReplicas > 0 && l.WaitTimeout == 0:
		l.WaitTimeout = Duration(min(DefaultWaitTimeout, l.RenewEvery.D()/2))
	case l.WaitReplicas > 0 && l.WaitTimeout.D() >= l.RenewEvery.D():
		v.add("lease.waitTimeout", "must be less than lease.renewEvery (%s): a renewal waits for the replicas within its period; got %s", l.RenewEvery, l.WaitTimeout)
	}
}

func (v *validator) handlerLimits() {
	h := &v.c.Handlers
	switch {
	case h.ExecConcurrency < 0:
		v.add("handlers.execConcurrency", "must not be negative, got %d (0 or unset: %d, 4 per CPU)", h.ExecConcurrency, handlers.DefaultExecConcurrency())
	case h.ExecConcurrency == 0:
		h.ExecConcurrency = handlers.DefaultExecConcurrency()
	}
}

func (v *validator) subscriptions() {
	c := v.c
	if len(c.Subscriptions) == 0 {
		v.add("subscriptions", "at least one subscription is required")
		return
	}
	names := map[string]int{}
	topics := map[string]int{} // topic -> index of its first subscription
	needKafka := -1
	for i := range c.Subscriptions {
		s := &c.Subscriptions[i]
		p := fmt.Sprintf("subscriptions[%d]", i)
		switch {
		case s.Name == "":
			v.add(p+".name", "is required")
		case strings.ContainsAny(s.Name, "{}"):
			v.add(p+".name", "%q must not contain '{' or '}'", s.Name)
		default:
			if j, dup := names[s.Name]; dup {
				v.add(p+".name", "%q is also the name of subscriptions[%d]", s.Name, j)
			} else {
				names[s.Name] = i
			}
		}
		switch {
		case (s.Redis == nil) == (s.Kafka == nil):
			v.add(p, "exactly one of redis, kafka is required")
		case s.Redis != nil:
			v.redisSource(s.Redis, p+".redis")
		case s.Kafka != nil:
			if needKafka < 0 {
				needKafka = i
			}
			v.kafkaSource(s, p, topics)
		}
		v.handler(&s.Handler, p+".handler")
		if s.Retry.Attempts < 0 {
			v.add(p+".retry.attempts", "must not be negative")
		}
		if s.Retry.MaxBackoff != 0 && s.Retry.Backoff > s.Retry.MaxBackoff {
			v.add(p+".retry.maxBackoff", "must not be below retry.backoff (%s)", s.Retry.Backoff)
		}
		for _, f := range []struct {
			name string
			n    int
		}{{"maxPartitions", s.MaxPartitions}, {"maxInFlight", s.MaxInFlight}, {"workers", s.Workers}} {
			if f.n < 0 {
				v.add(p+"."+f.name, "must not be negative, got %d", f.n)
			}
		}
	}
	// A node runs a topic's subscriptions under the name topic:<topic>:
	// a Redis subscription of that name would be refused when the node
	// is built.
	for i := range c.Subscriptions {
		s := &c.Subscriptions[i]
		if s.Redis == nil || s.Kafka != nil {
			continue
		}
		if topic, ok := strings.CutPrefix(s.Name, "topic:"); ok {
			if _, clash := topics[topic]; clash {
				v.add(fmt.Sprintf("subscriptions[%d].name", i), "%q is the name the node gives the subscriptions of Kafka topic %s: choose another", s.Name, topic)
			}
		}
	}
	if needKafka >= 0 && c.Kafka == nil {
		v.add(fmt.Sprintf("subscriptions[%d].kafka", needKafka), "a Kafka subscription needs the top-level kafka section (brokers)")
	}
}

func (v *validator) redisSource(r *RedisSource, p string) {
	layout, _ := broker.ParseLayout(v.c.Redis.Layout)
	if len(r.Categories) == 0 {
		v.add(p+".categories", "at least one category is required")
	}
	seen := map[string]int{}
	for i, cat := range r.Categories {
		cp := fmt.Sprintf("%s.categories[%d]", p, i)
		if err := layout.ValidateName("config", "category", cat); err != nil || strings.Contains(cat, "{") || strings.Contains(cat, "}") {
			v.add(cp, "invalid category %q", cat)
		} else if j, dup := seen[cat]; dup {
			v.add(cp, "%q is also %s.categories[%d]", cat, p, j)
		} else {
			seen[cat] = i
		}
	}
	if r.BackfillSuffix == "" {
		r.BackfillSuffix = broker.DefaultBackfillSuffix
	} else if strings.ContainsAny(r.BackfillSuffix, ":{}") || r.BackfillSuffix == broker.DLQSuffix {
		v.add(p+".backfillSuffix", "invalid suffix %q: no ':', braces, or %q", r.BackfillSuffix, broker.DLQSuffix)
	}
}

func (v *validator) kafkaSource(s *Subscription, p string, topics map[string]int) {
	k := s.Kafka
	if k.Topic == "" {
		v.add(p+".kafka.topic", "is required")
		return
	}
	if !validTopic(k.Topic) {
		v.add(p+".kafka.topic", "invalid Kafka topic name %q: 1 to 249 of a-z, A-Z, 0-9, '.', '_', '-' (not . or ..)", k.Topic)
	}
	if _, err := kafkasource.ParseAggregateFrom(k.Aggregate); err != nil {
		v.add(p+".kafka.aggregate", "want key, header:NAME or json:PATH, got %q", k.Aggregate)
	}
	switch k.StartFrom {
	case "":
		k.StartFrom = DefaultStartFrom
	case "earliest", "head":
	default:
		v.add(p+".kafka.startFrom", "want earliest or head, got %q", k.StartFrom)
	}
	// Subscriptions of one topic share its reader and its partitions'
	// leases, so the settings of the topic's partitions must agree.
	first, seen := topics[k.Topic]
	if !seen {
		topics[k.Topic] = indexOf(v.c.Subscriptions, s)
		return
	}
	f := v.c.Subscriptions[first]
	fp := fmt.Sprintf("subscriptions[%d]", first)
	agg := func(a string) string {
		if a == "" {
			return "key"
		}
		return a
	}
	switch {
	case agg(f.Kafka.Aggregate) != agg(k.Aggregate):
		v.add(p+".kafka.aggregate", "must equal %s.kafka.aggregate (%s): subscriptions of topic %s share its reader", fp, agg(f.Kafka.Aggregate), k.Topic)
	case f.Kafka.StartFrom != k.StartFrom:
		v.add(p+".kafka.startFrom", "must equal %s.kafka.startFrom (%s): subscriptions of topic %s share its reader", fp, f.Kafka.StartFrom, k.Topic)
	case f.MaxPartitions != s.MaxPartitions:
		v.add(p+".maxPartitions", "must equal %s.maxPartitions (%d): subscriptions of topic %s share its partitions", fp, f.MaxPartitions, k.Topic)
	case f.MaxInFlight != s.MaxInFlight:
		v.add(p+".maxInFlight", "must equal %s.maxInFlight (%d): subscriptions of topic %s share its reader", fp, f.MaxInFlight, k.Topic)
	case f.Workers != s.Workers:
		v.add(p+".workers", "must equal %s.workers (%d): subscriptions of topic %s share its lanes", fp, f.Workers, k.Topic)
	}
}

func indexOf(subs []Subscription, s *Subscription) int {
	for i := range subs {
		if &subs[i] == s {
			return i
		}
	}
	return -1
}

func (v *validator) handler(h *Handler, p string) {
	n := 0
	for _, set := range []bool{h.Exec != nil, h.HTTP != nil, h.Log != nil, h.Process != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		v.add(p, "exactly one of exec, http, log, process is required")
		return
	}
	switch {
	case h.Exec != nil:
		e := h.Exec
		if e.Timeout == 0 {
			e.Timeout = Duration(DefaultExecTimeout)
		}
		v.command(p+".exec", e.Command, &e.Dir, e.Env)
	case h.Process != nil:
		e := h.Process
		if e.Timeout == 0 {
			e.Timeout = Duration(DefaultProcessTimeout)
		}
		if e.StopTimeout == 0 {
			e.StopTimeout = Duration(DefaultProcessStopTimeout)
		}
		switch {
		case e.MaxInFlight < 0:
			v.add(p+".process.maxInFlight", "must not be negative, got %d", e.MaxInFlight)
		case e.MaxInFlight == 0:
			e.MaxInFlight = DefaultProcessMaxInFlight
		}
		v.command(p+".process", e.Command, &e.Dir, e.Env)
	case h.HTTP != nil:
		hh := h.HTTP
		if hh.URL == "" {
			v.add(p+".http.url", "is required")
		} else if u, err := url.Parse(hh.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.add(p+".http.url", "want an http:// or https:// URL with a host, got %q", RedactURL(hh.URL))
		}
		if hh.Timeout == 0 {
			hh.Timeout = Duration(DefaultHTTPTimeout)
		}
		for k := range hh.Headers {
			if k == "" || strings.ContainsAny(k, " :\r\n") {
				v.add(p+".http.headers", "invalid header name %q", k)
			}
		}
	}
}

// validTopic reports whether name is a legal Kafka topic name.
func validTopic(name string) bool {
	if name == "" || len(name) > 249 || name == "." || name == ".." {
		return false
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
		default:
			return false
		}
	}
	return true
}

// command checks the command, dir and env of an exec or process handler
// at p, and resolves dir.
func (v *validator) command(p string, command []string, dir *string, env map[string]string) {
	if len(command) == 0 || command[0] == "" {
		v.add(p+".command", "is required: the program and its arguments, e.g. [\"./handle.sh\"]")
		return
	}
	if *dir == "" {
		*dir = v.dir
	} else {
		*dir = v.path(*dir)
	}
	if st, err := os.Stat(*dir); err != nil || !st.IsDir() {
		v.add(p+".dir", "%s is not a directory", *dir)
	} else if err := executable(command[0], *dir); err != nil {
		v.add(p+".command", "%v", err)
	}
	for k := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			v.add(p+".env", "invalid variable name %q", k)
		}
	}
}

// RedactURL hides a URL's password.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		// Not a URL; hide everything between "//" and "@" to be safe.
		if i := strings.Index(raw, "@"); i >= 0 {
			if j := strings.Index(raw, "//"); j >= 0 && j < i {
				return raw[:j+2] + "xxxxx" + raw[i:]
			}
		}
		return raw
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

func redact(msg, raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return msg
	}
	if pw, ok := u.User.Password(); ok && pw != "" {
		return strings.ReplaceAll(msg, pw, "xxxxx")
	}
	return msg
}

// executable checks that the program of an exec handler can be run: a
// path (with a '/') relative to dir, or a name found in PATH.
func executable(prog, dir string) error {
	if !strings.Contains(prog, "/") {
		if _, err := exec.LookPath(prog); err != nil {
			return fmt.Errorf("%s: not found in PATH", prog)
		}
		return nil
	}
	p := prog
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	st, err := os.Stat(p)
	switch {
	case err != nil:
		return fmt.Errorf("%s: %v", p, unwrapPathError(err))
	case st.IsDir():
		return fmt.Errorf("%s is a directory", p)
	case st.Mode()&0o111 == 0:
		return fmt.Errorf("%s is not executable (chmod +x)", p)
	}
	return nil
}
