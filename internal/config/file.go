// Package config reads protctl's contexts file and resolves the settings a
// command runs with: which Redis and Kafka to talk to, which key layout,
// and the guard rails (read-only, protected).
//
// The contexts file ($XDG_CONFIG_HOME/protctl/config.yaml by default):
//
//	currentContext: prod
//	contexts:
//	  - name: prod
//	    redis:
//	      url: rediss://redis.prod.internal:6380/0
//	      layout: protean            # or cluster
//	      username: ops              # Redis ACL user
//	      passwordFile: ~/.config/protctl/prod.password
//	      tls: {ca: /etc/ssl/prod-ca.pem, cert: "", key: ""}
//	    kafka:
//	      brokers: [kafka-1.prod:9093, kafka-2.prod:9093]
//	      tls: {ca: /etc/ssl/prod-ca.pem}   # or enabled: true for the system roots
//	      sasl:
//	        mechanism: SCRAM-SHA-512     # PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
//	        username: ops
//	        passwordFile: ~/.config/protctl/prod-kafka.password
//	    categories: [shop::order, shop::payment]
//	    readOnly: true
//	    protected: true
//	  - name: local
//	    redis: {url: redis://127.0.0.1:6379/0}
//	  - name: ha                     # a primary watched by Sentinel
//	    redis:
//	      url: redis+sentinel://s1:26379,s2:26379,s3:26379/mymaster/0
//	      passwordFile: ~/.config/protctl/ha.password       # the primary's
//	      sentinel: {username: sentinel-ops, passwordFile: ~/.config/protctl/ha-sentinel.password}
//
// Every setting is resolved with the precedence flag > environment >
// context > default (Resolve). Passwords are never taken from argv: they
// come from PROTCTL_REDIS_PASSWORD / PROTCTL_REDIS_SENTINEL_PASSWORD /
// PROTCTL_KAFKA_PASSWORD or the context's passwordFile fields, and nothing
// in this package prints them. Kafka's tls and sasl sections are the node
// config's (internal/config/security holds the shared types and checks).
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/protctl/protctl/internal/config/security"
	"github.com/protctl/protctl/internal/redisconn"
)

// File is the contexts file.
type File struct {
	CurrentContext string    `yaml:"currentContext,omitempty" json:"currentContext,omitempty"`
	Contexts       []Context `yaml:"contexts" json:"contexts"`

	// path is where the file was read from ("" when it does not exist).
	path string
	// raw and loaded are the file as read, so that Save keeps its comments
	// and the nodes of the contexts it did not change.
	raw    *yaml.Node
	loaded map[string]Context
}

// Context names a deployment: its endpoints and its guard rails.
type Context struct {
	Name       string   `yaml:"name" json:"name"`
	Redis      Redis    `yaml:"redis,omitempty" json:"redis"`
	Kafka      Kafka    `yaml:"kafka,omitempty" json:"kafka"`
	Categories []string `yaml:"categories,omitempty" json:"categories"`
	ReadOnly   bool     `yaml:"readOnly,omitempty" json:"readOnly"`
	Protected  bool     `yaml:"protected,omitempty" json:"protected"`
}

// Redis is a context's Redis endpoint.
type Redis struct {
	URL          string `yaml:"url,omitempty" json:"url"`
	Layout       string `yaml:"layout,omitempty" json:"layout"`
	Username     string `yaml:"username,omitempty" json:"username"`
	PasswordFile string `yaml:"passwordFile,omitempty" json:"passwordFile"`
	TLS          TLS    `yaml:"tls,omitempty" json:"tls"`
	// Sentinel authenticates to the Sentinels of a redis+sentinel:// URL.
	Sentinel RedisSentinel `yaml:"sentinel,omitempty" json:"sentinel"`
}

// RedisSentinel is the Sentinels' ACL user and the file holding their
// password (or PROTCTL_REDIS_SENTINEL_PASSWORD): the Sentinels' ACL is
// their own, apart from the primary's (redis.username, redis.passwordFile).
type RedisSentinel struct {
	Username     string `yaml:"username,omitempty" json:"username"`
	PasswordFile string `yaml:"passwordFile,omitempty" json:"passwordFile"`
}

// TLS names PEM files for Redis TLS. A CA alone verifies the server; cert
// and key together authenticate the client.
type TLS struct {
	CA   string `yaml:"ca,omitempty" json:"ca"`
	Cert string `yaml:"cert,omitempty" json:"cert"`
	Key  string `yaml:"key,omitempty" json:"key"`
}

// Kafka is a context's Kafka endpoint and how to reach it: TLS (enabled,
// or any file, turns it on) and SASL (a mechanism turns it on; the
// password comes from PROTCTL_KAFKA_PASSWORD or sasl.passwordFile).
type Kafka struct {
	Brokers []string      `yaml:"brokers,omitempty" json:"brokers"`
	TLS     security.TLS  `yaml:"tls,omitempty" json:"tls"`
	SASL    security.SASL `yaml:"sasl,omitempty" json:"sasl"`
}

// validate checks the Redis section alone: the URL passes
// redisconn.Check (as --redis and context add/set do), a Sentinel URL is
// not used with the cluster layout, and Sentinel credentials come with a
// Sentinel URL (elsewhere they would be silently unused).
func (r Redis) validate() error {
	sentinel := redisconn.IsSentinelURL(r.URL)
	if r.URL != "" {
		if err := redisconn.Check(r.URL, r.Layout == "cluster"); err != nil {
			if errors.Is(err, redisconn.ErrClusterSentinel) {
				return errors.New("redis.layout: cluster cannot be used with a redis+sentinel:// redis.url: Redis Cluster fails over by itself")
			}
			return fmt.Errorf("redis.url: %w", err)
		}
	}
	if r.Sentinel != (RedisSentinel{}) && !sentinel && r.URL != "" {
		return fmt.Errorf("redis.sentinel: Sentinel credentials need a redis+sentinel:// redis.url, not %s", RedactURL(r.URL))
	}
	return nil
}

// validate checks what the file alone decides: a client certificate
// needs cert and key, and a sasl section needs a known mechanism and a
// username. Files are read only when the context is used (Resolve).
func (k Kafka) validate() error {
	if err := k.TLS.Check(); err != nil {
		return fmt.Errorf("kafka.tls.%w", err)
	}
	if k.SASL == (security.SASL{}) {
		return nil
	}
	if _, err := security.ParseMechanism(k.SASL.Mechanism); err != nil {
		return fmt.Errorf("kafka.sasl.mechanism: %w", err)
	}
	if k.SASL.Username == "" {
		return fmt.Errorf("kafka.sasl.username: is required with a mechanism")
	}
	return nil
}

// ErrNoContext is returned (wrapped) by File.Context for a name the file
// does not define.
var ErrNoContext = errors.New("config: no such context")

// DefaultPath is the contexts file used without --config or
// PROTCTL_CONFIG: $XDG_CONFIG_HOME/protctl/config.yaml, else
// ~/.config/protctl/config.yaml (on Windows, %AppData%\protctl\config.yaml).
func DefaultPath(getenv func(string) string) string {
	if x := getenv("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "protctl", "config.yaml")
	}
	if home := getenv("HOME"); home != "" && filepath.Separator == '/' {
		return filepath.Join(home, ".config", "protctl", "config.yaml")
	}
	if dir, err := os.UserConfigDir(); err == nil {
		return filepath.Join(dir, "protctl", "config.yaml")
	}
	return ""
}

// Load reads the contexts file at path. A missing file is an empty File
// unless mustExist (the path was named explicitly). Unknown fields,
// duplicate or empty context names, and a currentContext the file does
// not define are errors, so typos do not silently fall back to defaults.
func Load(path string, mustExist bool) (*File, error) {
	f := &File{}
	if path == "" {
		return f, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !mustExist {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	f.path = path
	if err := f.validate(); err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	var raw yaml.Node
	if yaml.Unmarshal(data, &raw) == nil && raw.Kind == yaml.DocumentNode {
		f.raw = &raw
		f.loaded = map[string]Context{}
		for _, c := range f.Contexts {
			f.loaded[c.Name] = c
		}
	}
	return f, nil
}

func (f *File) validate() error {
	seen := map[string]bool{}
	for i, c := range f.Contexts {
		if strings.TrimSpace(c.Name) == "" {
			return fmt.Errorf("contexts[%d] has no name", i)
		}
		if seen[c.Name] {
			return fmt.Errorf("context %q is defined twice", c.Name)
		}
		seen[c.Name] = true
		switch c.Redis.Layout {
		case "", "protean", "cluster":
		default:
			return fmt.Errorf("context %q: invalid redis.layout %q: want protean or cluster", c.Name, c.Redis.Layout)
		}
		if err := c.Redis.validate(); err != nil {
			return fmt.Errorf("context %q: %w", c.Name, err)
		}
		if err := c.Kafka.validate(); err != nil {
			return fmt.Errorf("context %q: %w", c.Name, err)
		}
	}
	if f.CurrentContext != "" && !seen[f.CurrentContext] {
		return fmt.Errorf("currentContext %q is not defined in contexts", f.CurrentContext)
	}
	return nil
}

// Path is where the file was read from; "" when there was no file.
func (f *File) Path() string { return f.path }

// Context returns the named context, or an error wrapping ErrNoContext.
func (f *File) Context(name string) (*Context, error) {
	for i := range f.Contexts {
		if f.Contexts[i].Name == name {
			return &f.Contexts[i], nil
		}
	}
	if f.path == "" {
		return nil, fmt.Errorf("%w %q (there is no contexts file)", ErrNoContext, name)
	}
	return nil, fmt.Errorf("%w %q in %s", ErrNoContext, name, f.path)
}

// Names lists the contexts' names in file order.
func (f *File) Names() []string {
	names := make([]string, len(f.Contexts))
	for i, c := range f.Contexts {
		names[i] = c.Name
	}
	return names
}

// Save writes the file to path atomically (a temporary file renamed over
// it, so a reader sees the old file or the new one), readable by the
// owner only, creating the directory if needed. The comments of the file
// as loaded are kept, but those inside a context that was changed.
func (f *File) Save(path string) error {
	if err := f.validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	data, err := f.marshalKeepingComments()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*.yaml")
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("config: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	f.path = path
	return nil
}

// expandPath resolves a path written in the file: "~/" is the home
// directory and a relative path is relative to the file's directory.
func (f *File) expandPath(p string, getenv func(string) string) string {
	if p == "" {
		return ""
	}
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home := getenv("HOME"); home != "" {
			return filepath.Join(home, strings.TrimPrefix(p, "~"))
		}
	}
	if !filepath.IsAbs(p) && f.path != "" {
		return filepath.Join(filepath.Dir(f.path), p)
	}
	return p
}
