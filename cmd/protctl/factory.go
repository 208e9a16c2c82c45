package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/config"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/redisconn"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
)

// go-redis logs pool and dial trouble on its own (to stderr, in its own
// format); route it to the invocation's logger at debug level instead (-vv).
var goRedisLog atomic.Pointer[slog.Logger]

type goRedisLogger struct{}

func (goRedisLogger) Printf(_ context.Context, format string, v ...any) {
	if l := goRedisLog.Load(); l != nil {
		l.Debug("go-redis: " + fmt.Sprintf(format, v...))
	}
}

func init() { redis.SetLogger(goRedisLogger{}) }

// Factory hands commands what they need, lazily: nothing is resolved,
// read or dialled until a command's run function asks for it, so --help,
// completion and usage errors never touch the config file or the network.
//
// A command's constructor takes the factory; its RunE copies what it needs
// (f.IOStreams, f.Printer(), f.RedisClient, ...) into its options struct
// and calls its run function. Providers are safe to call more than once
// and return the same value each time. One Factory serves one invocation.
type Factory struct {
	// IOStreams are the process's streams (or test buffers).
	IOStreams *output.IOStreams
	// Getenv reads the environment; tests replace it so that the host's
	// PROTCTL_* variables never leak in.
	Getenv func(string) string
	// Now is the clock for relative times.
	Now func() time.Time

	flags   globalFlags
	flagSet *pflag.FlagSet // the root's persistent flags, to ask what was given
	args    []string       // the invocation's arguments, for the audit log

	settingsOnce sync.Once
	settings     *config.Settings
	settingsErr  error

	printerOnce sync.Once
	printer     *output.Printer

	redisMu     sync.Mutex
	redisClient redis.UniversalClient
	// usedRedis and usedKafka record that a provider handed out a client
	// of the resolved settings, so that an unreachable backend's error
	// can name the settings that chose it (see operatorError).
	usedRedis, usedKafka bool
}

// globalFlags hold the root command's persistent flags.
type globalFlags struct {
	configPath string
	context    string
	redis      string
	kafka      string
	layout     string
	tlsCA      string
	tlsCert    string
	tlsKey     string

	kafkaTLS       bool
	kafkaTLSCA     string
	kafkaTLSCert   string
	kafkaTLSKey    string
	kafkaMechanism string
	kafkaUsername  string

	output    string
	noHeaders bool
	color     string
	timeout   time.Duration
	readOnly  bool
	yes       bool
	dryRun    bool
	verbose   int
}

// DefaultTimeout bounds each request to a backend (connect, read, write).
const DefaultTimeout = 10 * time.Second

func newFactory(ios *output.IOStreams) *Factory {
	return &Factory{IOStreams: ios, Getenv: os.Getenv, Now: time.Now}
}

// Settings resolves the endpoints and guard rails (flag > env > context >
// default). Errors are USAGE errors (exit 2): a bad config file, an unknown
// context, an unreadable password file.
func (f *Factory) Settings() (*config.Settings, error) {
	f.settingsOnce.Do(func() {
		fl := config.Flags{
			ConfigPath:   f.stringFlag("config", f.flags.configPath),
			Context:      f.stringFlag("context", f.flags.context),
			Redis:        f.stringFlag("redis", f.flags.redis),
			Kafka:        f.stringFlag("kafka", f.flags.kafka),
			Layout:       f.stringFlag("layout", f.flags.layout),
			RedisTLSCA:   f.stringFlag("redis-tls-ca", f.flags.tlsCA),
			RedisTLSCert: f.stringFlag("redis-tls-cert", f.flags.tlsCert),
			RedisTLSKey:  f.stringFlag("redis-tls-key", f.flags.tlsKey),

			KafkaTLSCA:         f.stringFlag("kafka-tls-ca", f.flags.kafkaTLSCA),
			KafkaTLSCert:       f.stringFlag("kafka-tls-cert", f.flags.kafkaTLSCert),
			KafkaTLSKey:        f.stringFlag("kafka-tls-key", f.flags.kafkaTLSKey),
			KafkaSASLMechanism: f.stringFlag("kafka-sasl-mechanism", f.flags.kafkaMechanism),
			KafkaUsername:      f.stringFlag("kafka-username", f.flags.kafkaUsername),
		}
		if f.changed("read-only") {
			v := f.flags.readOnly
			fl.ReadOnly = &v
		}
		if f.changed("kafka-tls") {
			v := f.flags.kafkaTLS
			fl.KafkaTLS = &v
		}
		f.settings, f.settingsErr = config.Resolve(fl, f.Getenv)
		if f.settingsErr != nil {
			f.settingsErr = clierr.Usage.Wrap(f.settingsErr)
		}
	})
	return f.settings, f.settingsErr
}

// ConfigFile reads the contexts file (--config, PROTCTL_CONFIG, or the
// default path) for commands that show or edit it. path is where it is or
// would be written; a missing default file is an empty File. Errors are
// USAGE errors.
func (f *Factory) ConfigFile() (file *config.File, path string, err error) {
	file, path, err = config.LoadLocated(f.stringFlag("config", f.flags.configPath), f.Getenv)
	if err != nil {
		return nil, path, clierr.Usage.Wrap(err)
	}
	return file, path, nil
}

func (f *Factory) changed(name string) bool {
	if f.flagSet == nil {
		return false
	}
	fl := f.flagSet.Lookup(name)
	return fl != nil && fl.Changed
}

func (f *Factory) stringFlag(name, value string) *string {
	if !f.changed(name) {
		return nil
	}
	return &value
}

// Layout is the Redis key layout in force (--layout, PROTCTL_LAYOUT, the
// context's redis.layout, else protean).
func (f *Factory) Layout() (broker.Layout, error) {
	s, err := f.Settings()
	if err != nil {
		return broker.Layout{}, err
	}
	return s.Layout, nil
}

// RedisClient returns the Redis client, creating it on the first call.
// Creating it does not dial: the first command does, and its failure
// (classified as UNAVAILABLE, exit 3) is the command's to return. With the
// cluster layout the client is a cluster client seeded with the URL's host
// and any addr= query parameters. The factory closes the client when the
// invocation ends; commands must not close it.
func (f *Factory) RedisClient() (redis.UniversalClient, error) {
	f.redisMu.Lock()
	defer f.redisMu.Unlock()
	if f.redisClient != nil {
		return f.redisClient, nil
	}
	s, err := f.Settings()
	if err != nil {
		return nil, err
	}
	c, err := newRedisClient(s, f.Timeout())
	if err != nil {
		return nil, clierr.Usage.Wrap(err)
	}
	goRedisLog.Store(f.Logger())
	f.Logger().Debug("redis client", "url", config.RedactURL(s.Redis.URL), "layout", s.Layout.String(), "context", s.Context)
	f.redisClient = c
	f.usedRedis = true
	return c, nil
}

// KafkaSource returns a new Kafka reader over the resolved brokers, TLS
// and SASL settings; the caller closes it. Creating it does no I/O: a
// wrong password or an untrusted certificate is the first call's
// kafkasource.ErrUnreachable (exit 3). No brokers, or a bad setting, is a
// USAGE error (exit 2).
func (f *Factory) KafkaSource() (*kafkasource.Source, error) {
	s, err := f.Settings()
	if err != nil {
		return nil, err
	}
	f.redisMu.Lock()
	f.usedKafka = true
	f.redisMu.Unlock()
	return newKafkaSource(s, f.Timeout())
}

// newKafkaSource is the Kafka reader of the operator commands and the
// dashboard's topics view. --timeout bounds each request and the retry
// budget.
func newKafkaSource(s *config.Settings, timeout time.Duration) (*kafkasource.Source, error) {
	if len(s.Kafka) == 0 {
		return nil, clierr.Usage.Errorf("no Kafka brokers: set --kafka, %s or the context's kafka.brokers", config.EnvKafka)
	}
	opts := []kafkasource.Option{kafkasource.WithClientID("protctl")}
	if timeout > 0 {
		opts = append(opts, kafkasource.WithDialTimeout(timeout), kafkasource.WithRequestTimeout(timeout), kafkasource.WithRetry(2, timeout))
	}
	// The server name is left empty: kafkasource checks each broker's
	// certificate against that broker's host (or the settings' serverName).
	tc, err := s.KafkaTLS.Config("")
	if err != nil {
		return nil, clierr.Usage.Errorf("Kafka TLS %w", err) // config.Resolve read the files already; they changed since
	}
	if tc != nil {
		opts = append(opts, kafkasource.WithTLS(tc))
	}
	if a := s.KafkaSASL; a.Mechanism != "" {
		opts = append(opts, kafkasource.WithSASL(a.Mechanism, a.Username, a.Password))
	}
	src, err := kafkasource.New(s.Kafka, opts...)
	if err != nil {
		return nil, clierr.Usage.Wrap(err)
	}
	return src, nil
}

// Printer prints results in the -o format (validated before any command
// runs).
func (f *Factory) Printer() *output.Printer {
	f.printerOnce.Do(func() {
		format, _ := output.ParseFormat(f.flags.output)
		f.printer = output.NewPrinter(f.IOStreams, output.PrinterOptions{
			Format:    format,
			NoHeaders: f.flags.noHeaders,
			Now:       f.Now,
		})
	})
	return f.printer
}

// Timeout bounds each backend request (connect, read, write); 0 means no
// bound.
func (f *Factory) Timeout() time.Duration { return f.flags.timeout }

// DryRun reports --dry-run: mutators print their plan and change nothing.
func (f *Factory) DryRun() bool { return f.flags.dryRun }

// Verbosity is the number of -v flags.
func (f *Factory) Verbosity() int { return f.flags.verbose }

// Logger logs to stderr: warnings by default, info with -v, debug with -vv.
func (f *Factory) Logger() *slog.Logger {
	level := slog.LevelWarn
	switch {
	case f.flags.verbose >= 2:
		level = slog.LevelDebug
	case f.flags.verbose == 1:
		level = slog.LevelInfo
	}
	var w io.Writer = f.IOStreams.ErrOut
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// confirmOptions are the guard rails of the resolved settings.
func (f *Factory) confirmOptions() (output.ConfirmOptions, error) {
	s, err := f.Settings()
	if err != nil {
		return output.ConfirmOptions{}, err
	}
	return output.ConfirmOptions{
		Yes:       f.flags.yes,
		ReadOnly:  s.ReadOnly,
		Protected: s.Protected,
		Context:   s.Context,
	}, nil
}

// CheckWritable refuses (exit 6) in read-only mode. Mutators call it first,
// before building a plan that is to be applied; a --dry-run needs no call.
func (f *Factory) CheckWritable() error {
	o, err := f.confirmOptions()
	if err != nil {
		return err
	}
	return output.CheckWritable(o)
}

// Confirm asks before a change (see output.IOStreams.Confirm): nil to go
// ahead, a REFUSED error (exit 6) in read-only mode, without --yes when
// stdin is not a terminal, or when the user declines.
func (f *Factory) Confirm(ctx context.Context, question string) error {
	o, err := f.confirmOptions()
	if err != nil {
		return err
	}
	return f.IOStreams.Confirm(ctx, question, o)
}

// close releases what the providers created.
func (f *Factory) close() {
	f.redisMu.Lock()
	defer f.redisMu.Unlock()
	if f.redisClient != nil {
		_ = f.redisClient.Close()
		f.redisClient = nil
	}
}

// newRedisClient is the client of the operator commands (through
// f.RedisClient), the dashboard, the demo and completion: redisconn.New
// with the resolved settings. --timeout bounds each request; 0 means no
// bound.
func newRedisClient(s *config.Settings, timeout time.Duration) (redis.UniversalClient, error) {
	c := s.Redis.Conn(s.Layout)
	c.ClientName = "protctl"
	c.Timeout = timeout
	if timeout <= 0 {
		c.Timeout = -1
	}
	return redisconn.New(c)
}
