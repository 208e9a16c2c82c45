package kafkasource

import (
	"context"
	"crypto/tls"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Option configures New.
type Option func(*config)

type config struct {
	clientID       string
	tls            *tls.Config
	saslMechanism  string
	saslUser       string
	saslPassword   string
	dialTimeout    time.Duration
	requestTimeout time.Duration
	retryTimeout   time.Duration
	retries        int
	fetchMaxWait   time.Duration
	fetchPartBytes int32
	scanBytes      int32
	aggregate      AggregateFrom
	logger         *slog.Logger
	extra          []kgo.Opt
}

func defaultConfig() config {
	return config{
		clientID:       "protctl",
		dialTimeout:    5 * time.Second,
		requestTimeout: 10 * time.Second,
		retryTimeout:   15 * time.Second,
		retries:        5,
		fetchMaxWait:   100 * time.Millisecond,
		fetchPartBytes: 128 << 10,
		scanBytes:      4 << 20,
	}
}

// WithClientID sets the client id brokers see in their logs and quotas.
// Default "protctl".
func WithClientID(id string) Option { return func(c *config) { c.clientID = id } }

// WithTLS dials brokers over TLS with this config (cloned per dial; the
// server name defaults to the broker's host). Default: plaintext.
func WithTLS(cfg *tls.Config) Option { return func(c *config) { c.tls = cfg } }

// WithSASL authenticates every connection. mechanism is "PLAIN",
// "SCRAM-SHA-256" or "SCRAM-SHA-512" (case-insensitive). Use it with
// WithTLS outside a trusted network: PLAIN sends the password as is.
// Default: no SASL.
func WithSASL(mechanism, user, password string) Option {
	return func(c *config) {
		c.saslMechanism, c.saslUser, c.saslPassword = strings.ToUpper(mechanism), user, password
	}
}

// WithDialTimeout bounds each connection attempt (TCP, TLS and SASL).
// Default 5s.
func WithDialTimeout(d time.Duration) Option { return func(c *config) { c.dialTimeout = d } }

// WithRequestTimeout bounds one request on an open connection (kgo's
// RequestTimeoutOverhead): a broker that accepts a connection and then
// says nothing cannot hang a call past it. Default 10s.
func WithRequestTimeout(d time.Duration) Option { return func(c *config) { c.requestTimeout = d } }

// WithRetry bounds the retries of one call: at most n tries within total,
// whichever ends first, even when the caller's context has no deadline.
// Default 5 tries within 15s.
func WithRetry(n int, total time.Duration) Option {
	return func(c *config) { c.retries, c.retryTimeout = n, total }
}

// WithFetchMaxWait is how long a Reader's fetch waits at the broker for
// new records. It also bounds how late a Resume or a newly assigned
// partition starts flowing: a fetch in flight for partitions that are
// caught up waits that long before the next one asks for the resumed
// partition. Default 100ms (Kafka's consumers use 500ms): topic
// subscriptions pause and resume partitions for backpressure all the
// time, and at 500ms a resume stalled the Kafka benchmark by about half a
// second in one run out of three; an idle reader asks each broker ten
// times a second instead of twice.
func WithFetchMaxWait(d time.Duration) Option { return func(c *config) { c.fetchMaxWait = d } }

// WithFetchMaxPartitionBytes is the most bytes a Reader's fetch asks for
// per partition (kgo's FetchMaxPartitionBytes; a record batch larger than
// it still comes whole). Default 128 KiB, an eighth of Kafka's consumers'
// 1 MiB. A reader feeds a runtime that handles every record, and nothing
// of a fetch can be handled before the whole fetch response is decoded:
// at 1 MiB per partition a response of 12 partitions held some 600,000
// small records, so a node started (or caught up) with one core decoding
// for a third of a second while the others waited, and it then handled
// records decoded long before, out of the CPU's caches. Smaller fetches
// let handling start at once and overlap decoding; they also keep what a
// throttled partition holds fetched but undelivered close to its
// in-flight window (a window of 1,000 records against a 50,000-record
// fetch made backpressure coarse). The Kafka benchmark measured 64, 128,
// 256 and 512 KiB and 1 MiB (docs/benchmarks.md). Raise it for large
// records on a high-latency link, where fewer, larger fetches pay fewer
// round trips.
func WithFetchMaxPartitionBytes(n int32) Option { return func(c *config) { c.fetchPartBytes = n } }

// WithScanBytes is the most bytes Scan and Rescan ask for per fetch.
// Default 4 MiB.
func WithScanBytes(n int32) Option { return func(c *config) { c.scanBytes = n } }

// WithAggregate says where a record's aggregate is, for Rescan. Default:
// the record key (the zero AggregateFrom).
func WithAggregate(a AggregateFrom) Option { return func(c *config) { c.aggregate = a } }

// WithLogger receives franz-go's warnings and errors (connection
// failures, metadata problems). Default: discarded.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithKgoOptions appends raw franz-go options to every client this
// package creates, after its own, so they win. It is the escape hatch
// for settings this package has no option for; options that change how
// partitions are consumed (groups, ConsumeTopics, reset offsets) break the
// Reader's contract.
func WithKgoOptions(opts ...kgo.Opt) Option {
	return func(c *config) { c.extra = append(c.extra, opts...) }
}

func (c *config) validate() error {
	switch c.saslMechanism {
	case "", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
	default:
		return invalidf("SASL mechanism %q (want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", c.saslMechanism)
	}
	if c.saslMechanism != "" && c.saslUser == "" {
		return invalidf("SASL %s needs a user", c.saslMechanism)
	}
	if c.dialTimeout <= 0 || c.requestTimeout <= 0 || c.retryTimeout <= 0 || c.fetchMaxWait <= 0 {
		return invalidf("timeouts must be positive")
	}
	if c.retries < 1 {
		return invalidf("retries must be at least 1, got %d", c.retries)
	}
	if c.fetchPartBytes <= 0 {
		return invalidf("fetch max partition bytes must be positive, got %d", c.fetchPartBytes)
	}
	if c.scanBytes <= 0 {
		return invalidf("scan bytes must be positive, got %d", c.scanBytes)
	}
	return c.aggregate.Validate()
}

// kgoOpts are the options every client shares: where the brokers are, how
// to reach them, and how long anything may take.
func (c *config) kgoOpts(brokers []string, hook kgo.Hook) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ClientID(c.clientID),
		kgo.DialTimeout(c.dialTimeout),
		kgo.RequestTimeoutOverhead(c.requestTimeout),
		kgo.RetryTimeout(c.retryTimeout),
		kgo.RequestRetries(c.retries),
		kgo.WithHooks(hook),
	}
	if c.tls != nil {
		opts = append(opts, kgo.DialTLSConfig(c.tls))
	}
	if m := c.saslMech(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	if c.logger != nil {
		opts = append(opts, kgo.WithLogger(slogAdapter{c.logger}))
	}
	return append(opts, c.extra...)
}

func (c *config) saslMech() sasl.Mechanism {
	user, pass := c.saslUser, c.saslPassword
	scramAuth := func(context.Context) (scram.Auth, error) { return scram.Auth{User: user, Pass: pass}, nil }
	switch c.saslMechanism {
	case "PLAIN":
		return plain.Auth{User: user, Pass: pass}.AsMechanism()
	case "SCRAM-SHA-256":
		return scram.Sha256(scramAuth)
	case "SCRAM-SHA-512":
		return scram.Sha512(scramAuth)
	}
	return nil
}

// slogAdapter hands franz-go's log lines to slog. franz-go logs from its
// own goroutines with no caller context, hence context.Background.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Level() kgo.LogLevel {
	ctx := context.Background()
	switch {
	case a.l.Enabled(ctx, slog.LevelDebug):
		return kgo.LogLevelDebug
	case a.l.Enabled(ctx, slog.LevelInfo):
		return kgo.LogLevelInfo
	case a.l.Enabled(ctx, slog.LevelWarn):
		return kgo.LogLevelWarn
	default:
		return kgo.LogLevelError
	}
}

func (a slogAdapter) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	l := slog.LevelDebug
	switch level {
	case kgo.LogLevelError:
		l = slog.LevelError
	case kgo.LogLevelWarn:
		l = slog.LevelWarn
	case kgo.LogLevelInfo:
		l = slog.LevelInfo
	}
	a.l.Log(context.Background(), l, "kafka: "+msg, keyvals...)
}
