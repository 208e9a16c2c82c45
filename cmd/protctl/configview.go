package main

import (
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/config"
	"github.com/protctl/protctl/internal/config/security"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/redisconn"
)

func newConfigCmd(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show the settings protctl resolves",
		Example: `  protctl config view
  protctl --context prod config view -o yaml`,
	}
	cmd.AddCommand(newConfigViewCmd(f))
	return cmd
}

// configView is what a command would run with. Secrets are never shown:
// the URL is redacted and the password is only said to be set.
type configView struct {
	ConfigPath *string           `json:"configPath"`
	Context    *string           `json:"context"`
	Redis      configViewRedis   `json:"redis"`
	Kafka      configViewKafka   `json:"kafka"`
	Layout     string            `json:"layout"`
	Categories []string          `json:"categories"`
	ReadOnly   bool              `json:"readOnly"`
	Protected  bool              `json:"protected"`
	Sources    map[string]string `json:"sources"`
}

type configViewRedis struct {
	URL         string        `json:"url"`
	Username    *string       `json:"username"`
	PasswordSet bool          `json:"passwordSet"`
	TLS         configViewTLS `json:"tls"`
	// Sentinel is what a redis+sentinel:// URL names; null for other URLs.
	Sentinel *configViewSentinel `json:"sentinel"`
}

// configViewTLS is the Redis TLS files in force, each null when not set
// (TLS itself may still be on, by a rediss:// URL).
type configViewTLS struct {
	CA   *string `json:"ca"`
	Cert *string `json:"cert"`
	Key  *string `json:"key"`
}

// configViewSentinel is the Sentinels a redis+sentinel:// URL names, the
// master name they watch, and how protctl logs in to them (the password
// is only said to be set).
type configViewSentinel struct {
	MasterName   string   `json:"masterName"`
	Addrs        []string `json:"addrs"`
	DB           int      `json:"db"`
	TLS          bool     `json:"tls"`
	Username     *string  `json:"username"`
	PasswordSet  bool     `json:"passwordSet"`
	PasswordFile *string  `json:"passwordFile"` // null unless the password came from a file
}

func newConfigViewSentinel(r config.RedisSettings) *configViewSentinel {
	su, err := redisconn.ParseSentinelURL(r.URL)
	if err != nil {
		return nil // not a Sentinel URL (config.Resolve refused bad ones)
	}
	return &configViewSentinel{
		MasterName: su.Master, Addrs: su.Addrs, DB: su.DB, TLS: su.TLS,
		Username:     nonEmpty(r.Sentinel.Username),
		PasswordSet:  r.Sentinel.Password != "",
		PasswordFile: nonEmpty(r.Sentinel.PasswordFile),
	}
}

// sentinelLine describes the Sentinel endpoint in one line of the table
// view.
func sentinelLine(s *configViewSentinel) string {
	if s == nil {
		return "-"
	}
	line := fmt.Sprintf("master %s via %s", s.MasterName, strings.Join(s.Addrs, ","))
	if s.Username != nil {
		line += ", as " + *s.Username
	}
	if s.PasswordSet {
		line += ", password set"
		if s.PasswordFile != nil {
			line += " (file " + *s.PasswordFile + ")"
		}
	}
	return line
}

// configViewKafka is the Kafka endpoint and its security: tls and sasl
// are null when off; the SASL password is only said to be set.
type configViewKafka struct {
	Brokers []string             `json:"brokers"`
	TLS     *security.TLS        `json:"tls"`
	SASL    *configViewKafkaSASL `json:"sasl"`
}

type configViewKafkaSASL struct {
	Mechanism    string  `json:"mechanism"`
	Username     string  `json:"username"`
	PasswordSet  bool    `json:"passwordSet"`
	PasswordFile *string `json:"passwordFile"` // null when the password came from PROTCTL_KAFKA_PASSWORD
}

func newConfigViewKafka(s *config.Settings) configViewKafka {
	k := configViewKafka{Brokers: append([]string{}, s.Kafka...)}
	if s.KafkaTLS.On() {
		t := s.KafkaTLS
		k.TLS = &t
	}
	if a := s.KafkaSASL; a.Mechanism != "" {
		k.SASL = &configViewKafkaSASL{Mechanism: a.Mechanism, Username: a.Username, PasswordSet: a.Password != ""}
		if a.PasswordFile != "" && a.Password != "" {
			k.SASL.PasswordFile = nonEmpty(a.PasswordFile)
		}
	}
	return k
}

// tlsLine describes a TLS setting in one line of the table view.
func tlsLine(t *security.TLS) string {
	if t == nil {
		return "off"
	}
	var parts []string
	if t.CA != "" {
		parts = append(parts, "ca "+t.CA)
	} else {
		parts = append(parts, "system roots")
	}
	if t.Cert != "" {
		parts = append(parts, "client cert "+t.Cert)
	}
	if t.ServerName != "" {
		parts = append(parts, "server name "+t.ServerName)
	}
	if t.InsecureSkipVerify {
		parts = append(parts, "NOT VERIFIED")
	}
	return "on (" + strings.Join(parts, ", ") + ")"
}

func saslLine(a *configViewKafkaSASL) string {
	if a == nil {
		return "none"
	}
	pw := "password not set"
	if a.PasswordSet {
		pw = "password set"
		if a.PasswordFile != nil {
			pw += " (file " + *a.PasswordFile + ")"
		}
	}
	return a.Mechanism + " as " + a.Username + ", " + pw
}

type configViewOptions struct {
	Printer  *output.Printer
	Settings func() (*config.Settings, error)
}

func newConfigViewCmd(f *Factory) *cobra.Command {
	opts := &configViewOptions{Settings: f.Settings}
	return &cobra.Command{
		Use:   "view",
		Short: "Show the resolved settings and where each came from",
		Long: `Show the settings a command would use after applying flag > environment >
context > default, and where each came from. Passwords are never shown, only
whether one is set; a password in the Redis URL is masked. With a
redis+sentinel:// URL, redis.sentinel shows the master name, the Sentinels
and how protctl logs in to them (null for other URLs). Kafka's TLS and
SASL settings (tls and sasl, null when off) appear only when brokers are
configured.`,
		Example: `  protctl config view
  PROTCTL_REDIS=redis://127.0.0.1:6380/0 protctl config view -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Printer = f.Printer()
			return runConfigView(opts)
		},
	}
}

func runConfigView(opts *configViewOptions) error {
	s, err := opts.Settings()
	if err != nil {
		return err
	}
	v := configView{
		ConfigPath: nonEmpty(s.ConfigPath),
		Context:    nonEmpty(s.Context),
		Redis: configViewRedis{
			URL:         config.RedactURL(s.Redis.URL),
			Username:    nonEmpty(s.Redis.Username),
			PasswordSet: s.Redis.Password != "" || urlHasPassword(s.Redis.URL),
			TLS:         configViewTLS{CA: nonEmpty(s.Redis.TLS.CA), Cert: nonEmpty(s.Redis.TLS.Cert), Key: nonEmpty(s.Redis.TLS.Key)},
			Sentinel:    newConfigViewSentinel(s.Redis),
		},
		Kafka:      newConfigViewKafka(s),
		Layout:     s.Layout.String(),
		Categories: append([]string{}, s.Categories...),
		ReadOnly:   s.ReadOnly,
		Protected:  s.Protected,
		Sources:    map[string]string{},
	}
	for k, src := range s.Sources {
		v.Sources[k] = string(src)
	}
	src := func(k string) string {
		if s, ok := v.Sources[k]; ok {
			return " (" + s + ")"
		}
		return ""
	}
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	return opts.Printer.PrintObject("Config", v, func(w io.Writer, st output.Styles) error {
		fields := []output.Field{
			{Label: "Config file", Value: orDash(v.ConfigPath)},
			{Label: "Context", Value: orDash(v.Context) + src("context")},
			{Label: "Redis", Value: v.Redis.URL + src("redis")},
			{Label: "Redis user", Value: orDash(v.Redis.Username)},
			{Label: "Redis password", Value: map[bool]string{true: "set", false: "not set"}[v.Redis.PasswordSet]},
			{Label: "Redis Sentinel", Value: sentinelLine(v.Redis.Sentinel) + sentinelSources(v.Sources)},
			{Label: "Layout", Value: v.Layout + src("layout")},
			{Label: "Kafka", Value: dashIfEmpty(strings.Join(v.Kafka.Brokers, ",")) + src("kafka")},
		}
		// How to reach the brokers says nothing without brokers.
		if len(v.Kafka.Brokers) > 0 {
			fields = append(fields,
				output.Field{Label: "Kafka TLS", Value: tlsLine(v.Kafka.TLS) + src("kafkaTls")},
				output.Field{Label: "Kafka SASL", Value: saslLine(v.Kafka.SASL) + src("kafkaSasl")},
			)
		}
		fields = append(fields,
			output.Field{Label: "Categories", Value: dashIfEmpty(strings.Join(v.Categories, ","))},
			output.Field{Label: "Read-only", Value: yes(v.ReadOnly) + src("readOnly")},
			output.Field{Label: "Protected", Value: yes(v.Protected)},
		)
		return output.WriteFields(w, st, fields...)
	})
}

// sentinelSources says where the Sentinel user and password came from
// (the endpoint itself comes from the URL: see the Redis line).
func sentinelSources(sources map[string]string) string {
	var parts []string
	if s, ok := sources["redisSentinelUsername"]; ok {
		parts = append(parts, "user: "+s)
	}
	if s, ok := sources["redisSentinelPassword"]; ok {
		parts = append(parts, "password: "+s)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func urlHasPassword(raw string) bool {
	if su, err := redisconn.ParseSentinelURL(raw); err == nil {
		_, ok := su.User.Password()
		return ok
	}
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return false
	}
	_, ok := u.User.Password()
	return ok
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
