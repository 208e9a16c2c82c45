package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/protctl/protctl/internal/config/security"
	"github.com/protctl/protctl/internal/redisconn"
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
	// The Sentinels' own ACL user and password, for a redis+sentinel://
	// URL (the URL's user is the primary's).
	EnvRedisSentinelUsername     = "PROTCTL_REDIS_SENTINEL_USERNAME"
	EnvRedisSentinelPassword     = "PROTCTL_REDIS_SENTINEL_PASSWORD"
	EnvRedisSentinelPasswordFile = "PROTCTL_REDIS_SENTINEL_PASSWORD_FILE"
	EnvKafka                     = "PROTCTL_KAFKA"
	EnvKafkaTLS                  = "PROTCTL_KAFKA_TLS" // true: TLS with the system roots
	EnvKafkaTLSCA                = "PROTCTL_KAFKA_TLS_CA"
	EnvKafkaTLSCert              = "PROTCTL_KAFKA_TLS_CERT"
	EnvKafkaTLSKey               = "PROTCTL_KAFKA_TLS_KEY"
	EnvKafkaTLSServer            = "PROTCTL_KAFKA_TLS_SERVER_NAME"
	EnvKafkaMechanism            = "PROTCTL_KAFKA_SASL_MECHANISM"
	EnvKafkaUsername             = "PROTCTL_KAFKA_USERNAME"
	EnvKafkaPassword             = "PROTCTL_KAFKA_PASSWORD" // the node's variable too
	EnvKafkaPasswordFile         = "PROTCTL_KAFKA_PASSWORD_FILE"
	EnvLayout                    = "PROTCTL_LAYOUT"
	EnvReadOnly                  = "PROTCTL_READ_ONLY"
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

	KafkaTLS           *bool
	KafkaTLSCA         *string
	KafkaTLSCert       *string
	KafkaTLSKey        *string
	KafkaSASLMechanism *string
	KafkaUsername      *string
	// There is no flag for the Kafka password, on purpose: argv is visible
	// to every user of the host (ps, /proc) and lands in shell history.
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
	// KafkaTLS and KafkaSASL say how to reach the brokers (zero without
	// brokers). TLS is on when KafkaTLS.On(); SASL when KafkaSASL.Mechanism
	// is set, and then Username and Password are too (PasswordFile is the
	// file the password was read from, "" when it came from
	// PROTCTL_KAFKA_PASSWORD). Paths are absolute or relative to the
	// working directory.
	KafkaTLS   security.TLS
	KafkaSASL  security.SASL
	Layout     broker.Layout
	Categories []string // the context's categories
	ReadOnly   bool
	Protected  bool

	// Sources maps "context", "redis", "kafka", "kafkaTls", "kafkaSasl",
	// "layout", "readOnly", "redisSentinelUsername" and
	// "redisSentinelPassword" to where each value came from ("kafkaTls":
	// the highest-precedence source of any TLS setting; "kafkaSasl": the
	// mechanism's; the Sentinel ones only when set).
	Sources map[string]Source
}

// RedisSettings are the resolved Redis connection settings.
type RedisSettings struct {
	URL      string // may hold credentials: print it with RedactURL
	Username string
	Password string `json:"-" yaml:"-"` // never printed
	TLS      TLS
	// Sentinel authenticates to the Sentinels of a redis+sentinel:// URL
	// (zero for other URLs).
	Sentinel SentinelAuth
}

// SentinelAuth is the Sentinels' ACL user and password.
type SentinelAuth struct {
	Username string
	Password string `json:"-" yaml:"-"` // never printed
	// PasswordFile is the file the password was read from ("" when it
	// came from PROTCTL_REDIS_SENTINEL_PASSWORD or there is none).
	PasswordFile string
}

// Conn is the redisconn configuration of these settings for layout; the
// caller sets the client name and the timeout.
func (r RedisSettings) Conn(layout broker.Layout) redisconn.Config {
	return redisconn.Config{
		URL:              r.URL,
		Cluster:          layout.IsCluster(),
		Username:         r.Username,
		Password:         r.Password,
		TLS:              security.TLS{CA: r.TLS.CA, Cert: r.TLS.Cert, Key: r.TLS.Key},
		SentinelUsername: r.Sentinel.Username,
		SentinelPassword: r.Sentinel.Password,
	}
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

	file, _, err := LoadLocated(fl.ConfigPath, getenv)
	if err != nil {
		return nil, err
	}
	s.ConfigPath = file.Path()

	// The context.
	name, src := pick(fl.Context, getenv(EnvContext), file.CurrentContext, "")
	ctx := &Context{}
	if name != "" {
		if ctx, err = file.Context(name); err != nil {
			// The file's own currentContext is checked when it is loaded.
			return nil, fmt.Errorf("%w (from %s)", err, map[Source]string{SourceFlag: "--context", SourceEnv: EnvContext, SourceContext: "currentContext"}[src])
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
	// The URL's user is the default, as redisconn applies it: a user in
	// the URL without a password is still that user (a nopass ACL user).
	s.Redis.Username, _ = pick(nil, getenv(EnvRedisUsername), ctxUser, urlUser(s.Redis.URL))
	if pw := getenv(EnvRedisPassword); pw != "" {
		s.Redis.Password = pw
	} else if pf, psrc := pick(nil, getenv(EnvRedisPasswordFile), ctxPassFile, ""); pf != "" {
		data, err := os.ReadFile(pf)
		if err != nil {
			return nil, fmt.Errorf("config: reading the Redis password file (%s): %w", settingName(psrc, "", EnvRedisPasswordFile, "redis.passwordFile", name), err)
		}
		s.Redis.Password = strings.TrimRight(string(data), "\r\n")
	}
	if err := s.resolveRedisTLS(fl, getenv, ctxTLS, name); err != nil {
		return nil, err
	}
	urlWhere := settingName(s.Sources["redis"], "--redis", EnvRedis, "redis.url", name)
	if redisconn.IsSentinelURL(s.Redis.URL) {
		var cs RedisSentinel
		if fromContext {
			cs = ctx.Redis.Sentinel
			cs.PasswordFile = file.expandPath(cs.PasswordFile, getenv)
		}
		if err := s.resolveSentinelAuth(getenv, cs, name); err != nil {
			return nil, err
		}
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
		// As with Redis, the context's TLS files and SASL credentials go
		// only to the context's own brokers.
		var ck *Kafka
		if ksrc == SourceContext {
			ck = &ctx.Kafka
		}
		if err := s.resolveKafkaSecurity(fl, getenv, file, name, ck); err != nil {
			return nil, err
		}
	}

	// Layout.
	layout, lsrc := pick(fl.Layout, getenv(EnvLayout), ctx.Redis.Layout, "protean")
	if s.Layout, err = broker.ParseLayout(layout); err != nil {
		return nil, fmt.Errorf("config: invalid layout %q (from %s): want protean or cluster", layout, settingName(lsrc, "--layout", EnvLayout, "redis.layout", name))
	}
	s.Sources["layout"] = lsrc
	// The URL's form, checked as context add/set and the contexts file's
	// loader check it (redisconn.Check), now that the layout is known.
	if err := redisconn.Check(s.Redis.URL, s.Layout.IsCluster()); err != nil {
		if errors.Is(err, redisconn.ErrClusterSentinel) {
			return nil, fmt.Errorf("config: the cluster layout (%s) cannot use the Sentinel URL of %s: Redis Cluster fails over by itself; use --layout protean with Sentinel, or a redis:// URL of the cluster's nodes",
				settingName(lsrc, "--layout", EnvLayout, "redis.layout", name), urlWhere)
		}
		return nil, fmt.Errorf("config: %s: %w", urlWhere, err)
	}

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

// resolveRedisTLS resolves the Redis TLS files (flag > env > context; ctx
// holds the context's, empty when the URL is not the context's) and reads
// them, so that a missing or bad one is a config error naming where its
// setting came from, before anything dials.
func (s *Settings) resolveRedisTLS(fl Flags, getenv func(string) string, ctx TLS, ctxName string) error {
	t := &s.Redis.TLS
	var caSrc, certSrc, keySrc Source
	t.CA, caSrc = pick(fl.RedisTLSCA, getenv(EnvRedisTLSCA), ctx.CA, "")
	t.Cert, certSrc = pick(fl.RedisTLSCert, getenv(EnvRedisTLSCert), ctx.Cert, "")
	t.Key, keySrc = pick(fl.RedisTLSKey, getenv(EnvRedisTLSKey), ctx.Key, "")
	caWhere := settingName(caSrc, "--redis-tls-ca", EnvRedisTLSCA, "redis.tls.ca", ctxName)
	certWhere := settingName(certSrc, "--redis-tls-cert", EnvRedisTLSCert, "redis.tls.cert", ctxName)
	keyWhere := settingName(keySrc, "--redis-tls-key", EnvRedisTLSKey, "redis.tls.key", ctxName)
	switch {
	case t.Cert != "" && t.Key == "":
		return fmt.Errorf("config: a Redis TLS client certificate needs both a cert and a key: the cert is set (%s), the key is not (--redis-tls-key, %s or redis.tls.key)", certWhere, EnvRedisTLSKey)
	case t.Cert == "" && t.Key != "":
		return fmt.Errorf("config: a Redis TLS client certificate needs both a cert and a key: the key is set (%s), the cert is not (--redis-tls-cert, %s or redis.tls.cert)", keyWhere, EnvRedisTLSCert)
	}
	if _, err := (security.TLS{CA: t.CA, Cert: t.Cert, Key: t.Key}).Config(""); err != nil {
		var fe *security.FieldError
		if errors.As(err, &fe) {
			w := map[string]string{"ca": caWhere, "cert": certWhere, "key": keyWhere}[fe.Field]
			return fmt.Errorf("config: Redis TLS %s (%s): %w", fe.Field, w, fe.Err)
		}
		return fmt.Errorf("config: Redis TLS: %w", err)
	}
	return nil
}

// LoadLocated loads the contexts file Locate names (--config as flag,
// else PROTCTL_CONFIG, else the default path) and returns it with its
// path. An error about a file that was named says who named it.
func LoadLocated(flag *string, getenv func(string) string) (*File, string, error) {
	path, explicit := Locate(flag, getenv)
	file, err := Load(path, explicit)
	if err != nil {
		if explicit {
			where := EnvConfig
			if flag != nil && *flag != "" {
				where = "--config"
			}
			err = fmt.Errorf("%w (the contexts file named by %s)", err, where)
		}
		return nil, path, err
	}
	return file, path, nil
}

// resolveKafkaSecurity resolves the Kafka TLS and SASL settings: each with
// flag > env > context, the context's (ck, nil when the brokers do not
// come from the context) only for the context's brokers. It reads the TLS
// files and the password file, so that a bad one is a config error naming
// where its setting came from, before anything dials.
func (s *Settings) resolveKafkaSecurity(fl Flags, getenv func(string) string, file *File, ctxName string, ck *Kafka) error {
	var c Kafka
	if ck != nil {
		c = *ck
		c.TLS.CA = file.expandPath(c.TLS.CA, getenv)
		c.TLS.Cert = file.expandPath(c.TLS.Cert, getenv)
		c.TLS.Key = file.expandPath(c.TLS.Key, getenv)
		c.SASL.PasswordFile = file.expandPath(c.SASL.PasswordFile, getenv)
	}
	// where names a setting as the user wrote it.
	where := func(src Source, flag, env, field string) string {
		return settingName(src, flag, env, field, ctxName)
	}
	var srcs []Source

	// TLS.
	t := &s.KafkaTLS
	switch {
	case fl.KafkaTLS != nil:
		t.Enabled = *fl.KafkaTLS
		srcs = append(srcs, SourceFlag)
	case getenv(EnvKafkaTLS) != "":
		v, err := strconv.ParseBool(getenv(EnvKafkaTLS))
		if err != nil {
			return fmt.Errorf("config: invalid %s %q: want true or false", EnvKafkaTLS, getenv(EnvKafkaTLS))
		}
		t.Enabled = v
		srcs = append(srcs, SourceEnv)
	case c.TLS.Enabled:
		t.Enabled = true
		srcs = append(srcs, SourceContext)
	}
	var caSrc, certSrc, keySrc, snSrc Source
	t.CA, caSrc = pick(fl.KafkaTLSCA, getenv(EnvKafkaTLSCA), c.TLS.CA, "")
	t.Cert, certSrc = pick(fl.KafkaTLSCert, getenv(EnvKafkaTLSCert), c.TLS.Cert, "")
	t.Key, keySrc = pick(fl.KafkaTLSKey, getenv(EnvKafkaTLSKey), c.TLS.Key, "")
	t.ServerName, snSrc = pick(nil, getenv(EnvKafkaTLSServer), c.TLS.ServerName, "")
	t.InsecureSkipVerify = c.TLS.InsecureSkipVerify
	for _, v := range []struct {
		val string
		src Source
	}{{t.CA, caSrc}, {t.Cert, certSrc}, {t.Key, keySrc}, {t.ServerName, snSrc}} {
		if v.val != "" {
			srcs = append(srcs, v.src)
		}
	}
	if t.InsecureSkipVerify {
		srcs = append(srcs, SourceContext)
	}
	caWhere := where(caSrc, "--kafka-tls-ca", EnvKafkaTLSCA, "kafka.tls.ca")
	certWhere := where(certSrc, "--kafka-tls-cert", EnvKafkaTLSCert, "kafka.tls.cert")
	keyWhere := where(keySrc, "--kafka-tls-key", EnvKafkaTLSKey, "kafka.tls.key")
	switch {
	case t.Cert != "" && t.Key == "":
		return fmt.Errorf("config: Kafka TLS: a client certificate (%s) needs a key: set --kafka-tls-key, %s or kafka.tls.key", certWhere, EnvKafkaTLSKey)
	case t.Cert == "" && t.Key != "":
		return fmt.Errorf("config: Kafka TLS: a client key (%s) needs a certificate: set --kafka-tls-cert, %s or kafka.tls.cert", keyWhere, EnvKafkaTLSCert)
	}
	if _, err := t.Config(""); err != nil {
		var fe *security.FieldError
		if errors.As(err, &fe) {
			w := map[string]string{"ca": caWhere, "cert": certWhere, "key": keyWhere}[fe.Field]
			return fmt.Errorf("config: Kafka TLS %s (%s): %w", fe.Field, w, fe.Err)
		}
		return fmt.Errorf("config: Kafka TLS: %w", err)
	}
	if src := strongest(srcs); src != "" && t.On() {
		s.Sources["kafkaTls"] = src
	}

	// SASL.
	a := &s.KafkaSASL
	mech, msrc := pick(fl.KafkaSASLMechanism, getenv(EnvKafkaMechanism), c.SASL.Mechanism, "")
	user, usrc := pick(fl.KafkaUsername, getenv(EnvKafkaUsername), c.SASL.Username, "")
	pwFile, psrc := pick(nil, getenv(EnvKafkaPasswordFile), c.SASL.PasswordFile, "")
	userWhere := where(usrc, "--kafka-username", EnvKafkaUsername, "kafka.sasl.username")
	pwWhere := where(psrc, "", EnvKafkaPasswordFile, "kafka.sasl.passwordFile")
	if mech == "" {
		// PROTCTL_KAFKA_PASSWORD alone is no error: it is the node's
		// variable too, and may be set in a shell that also runs protctl.
		switch {
		case user != "":
			return fmt.Errorf("config: Kafka SASL: a username (%s) needs a mechanism: set --kafka-sasl-mechanism, %s or kafka.sasl.mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", userWhere, EnvKafkaMechanism)
		case pwFile != "":
			return fmt.Errorf("config: Kafka SASL: a password file (%s) needs a mechanism: set --kafka-sasl-mechanism, %s or kafka.sasl.mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", pwWhere, EnvKafkaMechanism)
		}
		return nil
	}
	m, err := security.ParseMechanism(mech)
	if err != nil {
		return fmt.Errorf("config: Kafka SASL mechanism (%s): %w", where(msrc, "--kafka-sasl-mechanism", EnvKafkaMechanism, "kafka.sasl.mechanism"), err)
	}
	if user == "" {
		return fmt.Errorf("config: Kafka SASL %s needs a username: set --kafka-username, %s or kafka.sasl.username", m, EnvKafkaUsername)
	}
	a.Mechanism, a.Username = m, user
	if pw := getenv(EnvKafkaPassword); pw != "" {
		a.Password = pw
	} else if pwFile != "" {
		pw, err := security.ReadSecretFile(pwFile)
		if err != nil {
			return fmt.Errorf("config: reading the Kafka password file (%s): %w", pwWhere, err)
		}
		if pw == "" {
			return fmt.Errorf("config: the Kafka password file %s (%s) is empty", pwFile, pwWhere)
		}
		a.Password, a.PasswordFile = pw, pwFile // PasswordFile: where the password in use came from
	}
	if a.Password == "" {
		return fmt.Errorf("config: Kafka SASL %s needs a password: set %s or a password file (%s, kafka.sasl.passwordFile); there is no flag for it", m, EnvKafkaPassword, EnvKafkaPasswordFile)
	}
	s.Sources["kafkaSasl"] = msrc
	return nil
}

// resolveSentinelAuth resolves the Sentinels' user and password of a
// redis+sentinel:// URL: env > context (cs, zero when the URL is not the
// context's). The password file is read here, so that a bad one is a
// config error naming its setting before anything dials.
func (s *Settings) resolveSentinelAuth(getenv func(string) string, cs RedisSentinel, ctxName string) error {
	a := &s.Redis.Sentinel
	var usrc Source
	if a.Username, usrc = pick(nil, getenv(EnvRedisSentinelUsername), cs.Username, ""); a.Username != "" {
		s.Sources["redisSentinelUsername"] = usrc
	}
	if pw := getenv(EnvRedisSentinelPassword); pw != "" {
		a.Password = pw
		s.Sources["redisSentinelPassword"] = SourceEnv
		return nil
	}
	pf, psrc := pick(nil, getenv(EnvRedisSentinelPasswordFile), cs.PasswordFile, "")
	if pf == "" {
		return nil
	}
	pwWhere := settingName(psrc, "", EnvRedisSentinelPasswordFile, "redis.sentinel.passwordFile", ctxName)
	pw, err := security.ReadSecretFile(pf)
	if err != nil {
		return fmt.Errorf("config: reading the Sentinel password file (%s): %w", pwWhere, err)
	}
	if pw == "" {
		return fmt.Errorf("config: the Sentinel password file %s (%s) is empty", pf, pwWhere)
	}
	a.Password, a.PasswordFile = pw, pf
	s.Sources["redisSentinelPassword"] = psrc
	return nil
}

// settingName names a setting as the user wrote it: the flag, the
// environment variable, or the field of the context.
func settingName(src Source, flag, env, field, ctxName string) string {
	switch src {
	case SourceFlag:
		return flag
	case SourceEnv:
		return env
	case SourceContext:
		return fmt.Sprintf("%s of context %q", field, ctxName)
	}
	return field
}

// strongest is the highest-precedence source in srcs ("" for none).
func strongest(srcs []Source) Source {
	best := Source("")
	rank := map[Source]int{"": 0, SourceDefault: 1, SourceContext: 2, SourceEnv: 3, SourceFlag: 4}
	for _, s := range srcs {
		if rank[s] > rank[best] {
			best = s
		}
	}
	return best
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

// RedactURL hides the password of a URL's user info ("redis://u:xxxxx@h"),
// redis+sentinel:// URLs with several hosts included.
// Strings that do not parse are replaced entirely, since they might hold a
// password in a place we cannot find.
func RedactURL(raw string) string { return redisconn.Redact(raw) }

// urlUser is the user name in a Redis URL's user info ("" for none or a
// URL that does not parse; Resolve refuses those).
func urlUser(raw string) string {
	if redisconn.IsSentinelURL(raw) {
		if su, err := redisconn.ParseSentinelURL(raw); err == nil && su.User != nil {
			return su.User.Username()
		}
		return ""
	}
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		return u.User.Username()
	}
	return ""
}
