package config

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/protctl/protctl/pkg/broker"
)

// Environment variables protctl reads.
const (
	EnvConfig            = "PROTCTL_CONFIG"
	EnvContext           = "PROTCTL_CONTEXT"
	EnvRedis             = "PROTCTL_REDIS"
	EnvRedisUsername     = "PROTCTL_REDIS_USERNAME"
	EnvRedisPassword     = "PROTCTL_REDIS_PASSWORD"
	EnvRedisPasswordFile = "PROTCTL_REDIS_PASSWORD_FILE"
	EnvRedisTLSCA        = "PROTCTL_REDIS_TLS_CA"
	EnvRedisTLSCert      = "PROTCTL_REDIS_TLS_CERT"
	EnvRedisTLSKey       = "PROTCTL_REDIS_TLS_KEY"
	EnvKafka             = "PROTCTL_KAFKA"
	EnvLayout            = "PROTCTL_LAYOUT"
	EnvReadOnly          = "PROTCTL_READ_ONLY"
)

// DefaultRedisURL is the Redis used when nothing names one.
const DefaultRedisURL = "redis://127.0.0.1:6379/0"

// Flags are the global flags as given on the command line; nil means the
// flag was not given (so the environment, the context or the default
// decides).
type Flags struct {
	ConfigPath   *string
	Context      *string
	Redis        *string
	Kafka        *string // comma-separated brokers
	Layout       *string
	ReadOnly     *bool
	RedisTLSCA   *string
	RedisTLSCert *string
	RedisTLSKey  *string
}

// Source says where a setting came from, for `config view` and -v logs.
type Source string

// Sources.
const (
	SourceFlag    Source = "flag"
	SourceEnv     Source = "env"
	SourceContext Source = "context"
	SourceDefault Source = "default"
)

// Settings are what a command runs with, fully resolved.
type Settings struct {
	ConfigPath string // the contexts file consulted ("" if none)
	Context    string // the context in use; "" for none
	Redis      RedisSettings
	Kafka      []string // brokers; empty when no Kafka is configured
	Layout     broker.Layout
	Categories []string // the context's categories
	ReadOnly   bool
	Protected  bool

	// Sources maps "context", "redis", "kafka", "layout", "readOnly" to
	// where each value came from.
	Sources map[string]Source
}

// RedisSettings are the resolved Redis connection settings.
type RedisSettings struct {
	URL      string // may hold credentials: print it with RedactURL
	Username string
	Password string `json:"-" yaml:"-"` // never printed
	TLS      TLS
}

// Resolve computes the settings from the flags, the environment (getenv)
// and the contexts file, with the precedence flag > env > context >
// default. It reads the password file, if any. Errors are configuration
// errors: a missing named context or config file, a bad layout, an
// unreadable password file.
//
// The context's credentials (username, passwordFile, TLS files) are used
// only with the context's own Redis URL: pointing --redis or PROTCTL_REDIS
// elsewhere never sends the context's password to another server.
// PROTCTL_REDIS_PASSWORD and PROTCTL_REDIS_USERNAME apply to whichever
// server is used.
func Resolve(fl Flags, getenv func(string) string) (*Settings, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	s := &Settings{Sources: map[string]Source{}}

	path, explicit := Locate(fl.ConfigPath, getenv)
	file, err := Load(path, explicit)
	if err != nil {
		return nil, err
	}
	s.ConfigPath = file.Path()

	// The context.
	name, src := pick(fl.Context, getenv(EnvContext), file.CurrentContext, "")
	ctx := &Context{}
	if name != "" {
		if ctx, err = file.Context(name); err != nil {
			return nil, err
		}
		s.Context = name
		s.Sources["context"] = src
	}

	// Redis endpoint and credentials.
	s.Redis.URL, s.Sources["redis"] = pick(fl.Redis, getenv(EnvRedis), ctx.Redis.URL, DefaultRedisURL)
	fromContext := s.Sources["redis"] == SourceContext
	var ctxUser, ctxPassFile string
	var ctxTLS TLS
	if fromContext {
		ctxUser = ctx.Redis.Username
		ctxPassFile = file.expandPath(ctx.Redis.PasswordFile, getenv)
		ctxTLS = TLS{
			CA:   file.expandPath(ctx.Redis.TLS.CA, getenv),
			Cert: file.expandPath(ctx.Redis.TLS.Cert, getenv),
			Key:  file.expandPath(ctx.Redis.TLS.Key, getenv),
		}
	}
	s.Redis.Username, _ = pick(nil, getenv(EnvRedisUsername), ctxUser, "")
	if pw := getenv(EnvRedisPassword); pw != "" {
		s.Redis.Password = pw
	} else if pf, _ := pick(nil, getenv(EnvRedisPasswordFile), ctxPassFile, ""); pf != "" {
		data, err := os.ReadFile(pf)
		if err != nil {
			return nil, fmt.Errorf("config: reading the Redis password file: %w", err)
		}
		s.Redis.Password = strings.TrimRight(string(data), "\r\n")
	}
	s.Redis.TLS.CA, _ = pick(fl.RedisTLSCA, getenv(EnvRedisTLSCA), ctxTLS.CA, "")
	s.Redis.TLS.Cert, _ = pick(fl.RedisTLSCert, getenv(EnvRedisTLSCert), ctxTLS.Cert, "")
	s.Redis.TLS.Key, _ = pick(fl.RedisTLSKey, getenv(EnvRedisTLSKey), ctxTLS.Key, "")
	if (s.Redis.TLS.Cert == "") != (s.Redis.TLS.Key == "") {
		return nil, fmt.Errorf("config: a Redis TLS client certificate needs both a cert and a key")
	}
	if _, err := url.Parse(s.Redis.URL); err != nil {
		return nil, fmt.Errorf("config: invalid Redis URL %s", RedactURL(s.Redis.URL))
	}

	// Kafka.
	var ctxKafka string
	if len(ctx.Kafka.Brokers) > 0 {
		ctxKafka = strings.Join(ctx.Kafka.Brokers, ",")
	}
	kafka, ksrc := pick(fl.Kafka, getenv(EnvKafka), ctxKafka, "")
	s.Kafka = splitList(kafka)
	if len(s.Kafka) > 0 {
		s.Sources["kafka"] = ksrc
	}

	// Layout.
	layout, lsrc := pick(fl.Layout, getenv(EnvLayout), ctx.Redis.Layout, "protean")
	if s.Layout, err = broker.ParseLayout(layout); err != nil {
		return nil, fmt.Errorf("config: invalid layout %q (from %s): want protean or cluster", layout, lsrc)
	}
	s.Sources["layout"] = lsrc

	// Guard rails.
	switch {
	case fl.ReadOnly != nil:
		s.ReadOnly, s.Sources["readOnly"] = *fl.ReadOnly, SourceFlag
	case getenv(EnvReadOnly) != "":
		v, err := strconv.ParseBool(getenv(EnvReadOnly))
		if err != nil {
			return nil, fmt.Errorf("config: invalid %s %q: want true or false", EnvReadOnly, getenv(EnvReadOnly))
		}
		s.ReadOnly, s.Sources["readOnly"] = v, SourceEnv
	case ctx.ReadOnly:
		s.ReadOnly, s.Sources["readOnly"] = true, SourceContext
	default:
		s.Sources["readOnly"] = SourceDefault
	}
	s.Protected = ctx.Protected
	s.Categories = append([]string(nil), ctx.Categories...)
	return s, nil
}

// Locate says which contexts file to use: --config, else PROTCTL_CONFIG,
// else DefaultPath. explicit is true when the file was named (and so must
// exist).
func Locate(flag *string, getenv func(string) string) (path string, explicit bool) {
	if flag != nil && *flag != "" {
		return *flag, true
	}
	if v := getenv(EnvConfig); v != "" {
		return v, true
	}
	return DefaultPath(getenv), false
}

// pick applies the precedence: a given flag, then a non-empty env value,
// then a non-empty context value, then the default.
func pick(flag *string, env, ctx, def string) (string, Source) {
	switch {
	case flag != nil:
		return *flag, SourceFlag
	case env != "":
		return env, SourceEnv
	case ctx != "":
		return ctx, SourceContext
	}
	return def, SourceDefault
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// RedactURL hides the password of a URL's user info ("redis://u:xxxxx@h").
// Strings that do not parse are replaced entirely, since they might hold a
// password in a place we cannot find.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable URL>"
	}
	return u.Redacted()
}
