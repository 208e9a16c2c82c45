// Package nodeconfig loads the configuration of `protctl run node`: a YAML
// file whose field names are API (docs/node-config.md documents every
// field; testdata/node.yaml is a commented example).
//
// Load decodes strictly: an unknown field, a value of the wrong type or an
// invalid value is rejected before anything starts, and every problem is
// reported with the file, the line and the field's path:
//
//	node.yaml:14: subscriptions[1].handler: exactly one of exec, http, log, process is required
//
// After decoding, Load fills in the defaults (written on each field below
// and in the docs) and reads the secrets: the Redis password from
// PROTCTL_REDIS_PASSWORD or redis.passwordFile, the Sentinels' password
// from PROTCTL_REDIS_SENTINEL_PASSWORD or redis.sentinel.passwordFile
// (with a redis+sentinel:// URL), the Kafka SASL password
// from PROTCTL_KAFKA_PASSWORD or kafka.sasl.passwordFile, and the admin
// token from PROTCTL_ADMIN_TOKEN or admin.tokenFile. Secrets never appear
// in the file itself, in error messages or in logs.
package nodeconfig

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/protctl/protctl/internal/config/security"
)

// Environment variables Load reads. Each wins over the matching file
// setting.
const (
	EnvRedisPassword = "PROTCTL_REDIS_PASSWORD"
	// EnvRedisSentinelPassword is the Sentinels' password (redis.sentinel).
	EnvRedisSentinelPassword = "PROTCTL_REDIS_SENTINEL_PASSWORD"
	EnvKafkaPassword         = "PROTCTL_KAFKA_PASSWORD"
	EnvAdminToken            = "PROTCTL_ADMIN_TOKEN"
)

// Defaults.
const (
	DefaultAdminListen = "127.0.0.1:7070"
	DefaultLeaseTTL    = 15 * time.Second
	// DefaultWaitTimeout bounds a lease write's WAIT for replicas
	// (lease.waitTimeout), unless renewEvery/2 is shorter.
	DefaultWaitTimeout  = time.Second
	DefaultDrainTimeout = 30 * time.Second
	DefaultExecTimeout  = 30 * time.Second
	DefaultHTTPTimeout  = 10 * time.Second
	DefaultLayout       = "protean"
	DefaultStartFrom    = "earliest"
)

// A process handler's defaults.
const (
	DefaultProcessTimeout     = 30 * time.Second
	DefaultProcessMaxInFlight = 64
	DefaultProcessStopTimeout = 10 * time.Second
)

// Config is a node's configuration. Field names (the yaml tags) are API:
// fields are added, never renamed.
type Config struct {
	// Service groups the nodes that share partitions. Required.
	Service string `yaml:"service"`
	// Node is this node's id in leases and membership. Default:
	// hostname-pid.
	Node string `yaml:"node"`
	// Redis holds leases, membership, the failure ledger and checkpoints,
	// and the partition streams of Redis subscriptions. Required.
	Redis Redis `yaml:"redis"`
	// Kafka is required when a subscription reads a Kafka topic.
	Kafka *Kafka `yaml:"kafka"`
	// Admin is the HTTP admin endpoint.
	Admin Admin `yaml:"admin"`
	// Lease sets the partition leases' TTL and renewal period.
	Lease Lease `yaml:"lease"`
	// Drain bounds the graceful stop.
	Drain Drain `yaml:"drain"`
	// Handlers are the node's limits on its handlers, across its
	// subscriptions.
	Handlers HandlerLimits `yaml:"handlers"`
	// Subscriptions are the node's consumers. At least one.
	Subscriptions []Subscription `yaml:"subscriptions"`

	// File is the path the config was loaded from ("" when parsed from
	// bytes); relative paths in it are resolved against its directory.
	File string `yaml:"-"`
}

// Redis is the Redis connection.
type Redis struct {
	// URL is redis://[user@]host:port/db, rediss:// for TLS,
	// unix:///path, or
	// redis+sentinel://[user@]host:26379,host:26379/MASTER/db for the
	// primary that Sentinel names (rediss+sentinel:// for TLS). A
	// password in the URL is allowed but discouraged: use
	// PROTCTL_REDIS_PASSWORD or PasswordFile. Required.
	URL string `yaml:"url"`
	// Layout is the key layout: protean (default) or cluster (Redis
	// Cluster hash tags; the URL then seeds a cluster client).
	Layout string `yaml:"layout"`
	// Username is the ACL user (overrides the URL's).
	Username string `yaml:"username"`
	// PasswordFile holds the password (trailing newline ignored).
	PasswordFile string `yaml:"passwordFile"`
	// TLS configures TLS; rediss:// alone uses the system roots. With
	// Sentinel it applies to the Sentinels and the primary alike.
	TLS TLS `yaml:"tls"`
	// Sentinel authenticates to the Sentinels of a redis+sentinel:// URL;
	// Username, PasswordFile and the URL's user are the primary's.
	Sentinel RedisSentinel `yaml:"sentinel"`

	// Password is the resolved secret (env, file, or URL).
	Password string `yaml:"-"`
}

// RedisSentinel is the Sentinels' own ACL user and password.
type RedisSentinel struct {
	// Username is the Sentinels' ACL user.
	Username string `yaml:"username"`
	// PasswordFile holds the Sentinels' password, unless
	// PROTCTL_REDIS_SENTINEL_PASSWORD is set.
	PasswordFile string `yaml:"passwordFile"`

	// Password is the resolved secret (env or file).
	Password string `yaml:"-"`
}

// TLS configures a TLS client: enabled, ca, cert, key, serverName,
// insecureSkipVerify. It is the type the CLI's contexts file uses too
// (internal/config/security), so both files spell and check it alike.
type TLS = security.TLS

// Kafka is the Kafka connection.
type Kafka struct {
	// Brokers are host:port seeds. Required.
	Brokers []string `yaml:"brokers"`
	// TLS configures TLS (enabled: true, or any file, turns it on).
	TLS TLS `yaml:"tls"`
	// SASL authenticates the connections.
	SASL *SASL `yaml:"sasl"`
	// ClientID names the client in the brokers' logs. Default: protctl.
	ClientID string `yaml:"clientId"`
	// FetchMaxPartitionBytes is the most bytes a topic's reader fetches
	// per partition at once. 0: kafkasource's default (128 KiB, sized so
	// that handling overlaps decoding); raise it for large records on a
	// high-latency link.
	FetchMaxPartitionBytes int `yaml:"fetchMaxPartitionBytes"`
}

// SASL is Kafka SASL authentication: mechanism (PLAIN, SCRAM-SHA-256 or
// SCRAM-SHA-512), username, and passwordFile unless PROTCTL_KAFKA_PASSWORD
// is set. It is the type the CLI's contexts file uses too
// (internal/config/security).
type SASL = security.SASL

// Admin is the admin HTTP endpoint.
type Admin struct {
	// Listen is host:port. Default: 127.0.0.1:7070. Port 0 picks a free
	// port (logged at start). A token is required when the host is not a
	// loopback address.
	Listen string `yaml:"listen"`
	// Disabled turns the endpoint off.
	Disabled bool `yaml:"disabled"`
	// TokenFile holds the bearer token, unless PROTCTL_ADMIN_TOKEN is set.
	// With a token every request must carry "Authorization: Bearer
	// <token>", on loopback too.
	TokenFile string `yaml:"tokenFile"`
	// PublicProbes serves /healthz and /readyz without the token (they
	// reveal only ok or not), for orchestrators' probes.
	PublicProbes bool `yaml:"publicProbes"`

	// Token is the resolved secret ("" for none).
	Token string `yaml:"-"`
}

// Lease sets the partition leases' timing.
type Lease struct {
	// TTL is the leases' time to live: a dead node's partitions move after
	// at most TTL + RenewEvery. Default: 15s.
	TTL Duration `yaml:"ttl"`
	// RenewEvery is the renewal (and heartbeat) period; it must be less
	// than half of TTL. Default: TTL/5.
	RenewEvery Duration `yaml:"renewEvery"`
	// WaitReplicas is how many replicas must acknowledge (WAIT) every
	// lease acquisition and renewal before the node uses it, so that a
	// replica promoted by a failover never hands a generation an owner
	// used to another owner, nor expires a lease its owner still trusts
	// (docs/decisions/0039-redis-failover-fencing.md). Default: 0, none.
	WaitReplicas int `yaml:"waitReplicas"`
	// WaitTimeout bounds each WAIT; an acquisition not acknowledged in
	// time is released, a renewal not acknowledged is not trusted.
	// Default: 1s, or renewEvery/2 when that is shorter; it must be
	// less than renewEvery.
	WaitTimeout Duration `yaml:"waitTimeout"`
}

// Drain bounds the graceful stop after SIGTERM or SIGINT.
type Drain struct {
	// Timeout is how long in-flight messages may take to finish before
	// their handlers are cancelled (they then stay pending for the next
	// owner). Default: 30s.
	Timeout Duration `yaml:"timeout"`
}

// HandlerLimits are the node's limits on its handlers.
type HandlerLimits struct {
	// ExecConcurrency bounds the exec handler commands running at once on
	// the node, over every subscription; calls beyond it wait for a slot,
	// and the wait does not count against exec.timeout. Default: 4 x the
	// CPUs (handlers.DefaultExecConcurrency).
	ExecConcurrency int `yaml:"execConcurrency"`
}

// Subscription is one consumer: a name, a source and a handler.
type Subscription struct {
	// Name is the consumer group (Redis) or the subscription's name under
	// its topic (Kafka). Unique in the node. Required.
	Name string `yaml:"name"`
	// Redis and Kafka are the source: exactly one.
	Redis *RedisSource `yaml:"redis"`
	Kafka *KafkaSource `yaml:"kafka"`
	// Handler handles each message. Required.
	Handler Handler `yaml:"handler"`
	// Retry governs aggregate failures before parking.
	Retry Retry `yaml:"retry"`
	// MaxPartitions caps the partitions this node takes (HRW with a cap).
	// 0 means no cap.
	MaxPartitions int `yaml:"maxPartitions"`
	// MaxInFlight is the in-flight window: Redis, the entries read in one
	// fenced batch (default 100); Kafka, records of one partition delivered
	// and not yet done (default 1000).
	MaxInFlight int `yaml:"maxInFlight"`
	// Workers bounds the handler calls running at once: Redis, partitions
	// handled at once (default 16); Kafka, aggregates of one partition
	// handled at once (default 16).
	Workers int `yaml:"workers"`
}

// RedisSource reads Redis partitioned streams.
type RedisSource struct {
	// Categories are read together under one lease per key. At least one.
	Categories []string `yaml:"categories"`
	// BackfillSuffix names the low-priority lane. Default: backfill.
	BackfillSuffix string `yaml:"backfillSuffix"`
	// ReapAfter retires partitions idle this long (conservative reap).
	// Default: 0, never.
	ReapAfter Duration `yaml:"reapAfter"`
}

// KafkaSource reads a Kafka topic.
type KafkaSource struct {
	// Topic is required.
	Topic string `yaml:"topic"`
	// Aggregate is where a record's aggregate is: key (default),
	// header:NAME or json:PATH.
	Aggregate string `yaml:"aggregate"`
	// StartFrom is where a subscription without a checkpoint starts:
	// earliest (default) or head.
	StartFrom string `yaml:"startFrom"`
}

// Handler is exactly one of Exec, HTTP, Log and Process.
type Handler struct {
	Exec    *Exec    `yaml:"exec"`
	HTTP    *HTTP    `yaml:"http"`
	Log     *Log     `yaml:"log"`
	Process *Process `yaml:"process"`
}

// Exec runs a command per message.
type Exec struct {
	// Command is the program and its arguments (no shell). Required.
	Command []string `yaml:"command"`
	// Timeout kills the command's process group. Default: 30s.
	Timeout Duration `yaml:"timeout"`
	// Dir is the working directory; a relative Command[0] is resolved
	// against it. Default: the config file's directory.
	Dir string `yaml:"dir"`
	// Env adds environment variables to the node's own.
	Env map[string]string `yaml:"env"`
}

// Process sends each message to one long-lived child process, as a line
// of JSON on its stdin, and reads the result from its stdout
// (docs/node-config.md, "process").
type Process struct {
	// Command is the program and its arguments (no shell). Required.
	Command []string `yaml:"command"`
	// Dir is the working directory; a relative Command[0] is resolved
	// against it. Default: the config file's directory.
	Dir string `yaml:"dir"`
	// Env adds environment variables to the node's own.
	Env map[string]string `yaml:"env"`
	// Timeout bounds one call, from the moment its request is written.
	// Default: 30s.
	Timeout Duration `yaml:"timeout"`
	// MaxInFlight bounds the calls the child has at once, over all
	// partitions. Default: 64.
	MaxInFlight int `yaml:"maxInFlight"`
	// StopTimeout bounds the wait for the child to exit after its stdin
	// is closed at shutdown; then it is killed. Default: 10s.
	StopTimeout Duration `yaml:"stopTimeout"`
}

// HTTP posts each message to a URL.
type HTTP struct {
	// URL is an http:// or https:// URL. Required.
	URL string `yaml:"url"`
	// Timeout bounds one request; a timeout is a systemic failure.
	// Default: 10s.
	Timeout Duration `yaml:"timeout"`
	// Headers are added to every request.
	Headers map[string]string `yaml:"headers"`
}

// Log prints each message (for demos).
type Log struct {
	// Payload prints the envelope too.
	Payload bool `yaml:"payload"`
}

// Retry is the retry policy of aggregate failures.
type Retry struct {
	// Attempts before parking. Default: 3.
	Attempts int `yaml:"attempts"`
	// Backoff before the second attempt; it doubles. Default: 200ms.
	Backoff Duration `yaml:"backoff"`
	// MaxBackoff caps the backoff. Default: 10s.
	MaxBackoff Duration `yaml:"maxBackoff"`
}

// Duration is a time.Duration written as a Go duration string ("15s",
// "200ms").
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// Load reads, decodes and validates the config at path. getenv (nil means
// os.Getenv) supplies the secrets' environment variables. A failure is an
// *Error listing every problem found.
func Load(path string, getenv func(string) string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{File: path, Problems: []Problem{{Msg: fmt.Sprintf("cannot read the config: %v", unwrapPathError(err))}}}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	return parse(data, path, abs, getenv)
}

// Parse decodes and validates a config held in memory; relative paths are
// resolved against dir.
func Parse(data []byte, name, dir string, getenv func(string) string) (*Config, error) {
	return parse(data, name, filepath.Join(dir, filepath.Base(name)), getenv)
}

func parse(data []byte, name, abs string, getenv func(string) string) (*Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	c := &Config{}
	d := &decoder{}
	if !d.decodeDocument(data, c) {
		// Not YAML, or empty: there is nothing to validate.
		return nil, &Error{File: name, Problems: d.problems}
	}
	// Validate what was decoded even when some fields were not, so that
	// every problem is reported at once rather than one run at a time;
	// the validator's view of a field that failed to decode (left zero)
	// is dropped (see suppressed).
	c.File = abs
	v := &validator{c: c, lines: d.lines, getenv: getenv, dir: filepath.Dir(abs)}
	v.run()
	problems := d.problems
	for _, p := range v.problems {
		if !d.suppressed(p) {
			problems = append(problems, p)
		}
	}
	if len(problems) > 0 {
		sortProblems(problems)
		return nil, &Error{File: name, Problems: problems}
	}
	return c, nil
}

func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
