package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/protctl/protctl/internal/testenv"
)

const sample = `currentContext: prod
contexts:
  - name: prod
    redis:
      url: rediss://redis.prod:6380/0
      layout: cluster
      username: ops
      passwordFile: prod.password
      tls: {ca: ca.pem}
    kafka:
      brokers: [k1:9092, k2:9092]
    categories: [shop::order]
    readOnly: true
    protected: true
  - name: local
    redis: {url: "redis://127.0.0.1:6390/0"}
`

// writeConfig writes sample (or content) into a temp dir and returns an
// environment with XDG_CONFIG_HOME pointing there.
func writeConfig(t *testing.T, content string) (dir string, env map[string]string) {
	t.Helper()
	dir = t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "protctl"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "protctl", "config.yaml"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "protctl", "prod.password"), []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The sample's Redis CA: Resolve reads the TLS files it will use.
	ca, err := os.ReadFile(testenv.NewPKI(t).CA)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "protctl", "ca.pem"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, map[string]string{"XDG_CONFIG_HOME": dir, "HOME": t.TempDir()}
}

func getenv(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}

func str(s string) *string { return &s }

func TestResolveDefaultsWithoutAnything(t *testing.T) {
	s, err := Resolve(Flags{}, getenv(map[string]string{"HOME": t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	if s.Context != "" || s.Redis.URL != DefaultRedisURL || s.Layout.String() != "protean" || s.ReadOnly || len(s.Kafka) != 0 {
		t.Fatalf("defaults wrong: %+v", s)
	}
	if s.Sources["redis"] != SourceDefault || s.Sources["layout"] != SourceDefault {
		t.Fatalf("sources: %v", s.Sources)
	}
}

func TestResolveCurrentContext(t *testing.T) {
	dir, env := writeConfig(t, sample)
	s, err := Resolve(Flags{}, getenv(env))
	if err != nil {
		t.Fatal(err)
	}
	if s.Context != "prod" || s.Redis.URL != "rediss://redis.prod:6380/0" || !s.Layout.IsCluster() {
		t.Fatalf("context not applied: %+v", s)
	}
	if s.Redis.Username != "ops" || s.Redis.Password != "s3cret" {
		t.Fatalf("credentials: user %q password %q", s.Redis.Username, s.Redis.Password)
	}
	if s.Redis.TLS.CA != filepath.Join(dir, "protctl", "ca.pem") {
		t.Fatalf("relative paths are relative to the file: %q", s.Redis.TLS.CA)
	}
	if !s.ReadOnly || !s.Protected || strings.Join(s.Kafka, ",") != "k1:9092,k2:9092" || s.Categories[0] != "shop::order" {
		t.Fatalf("context fields: %+v", s)
	}
	// The context itself was chosen by the file's currentContext.
	if s.Sources["redis"] != SourceContext || s.Sources["readOnly"] != SourceContext || s.Sources["context"] != SourceContext {
		t.Fatalf("sources: %v", s.Sources)
	}
}

func TestPrecedenceFlagOverEnvOverContext(t *testing.T) {
	_, env := writeConfig(t, sample)
	cases := []struct {
		name    string
		flags   Flags
		env     map[string]string
		wantURL string
		wantSrc Source
	}{
		{"context", Flags{}, nil, "rediss://redis.prod:6380/0", SourceContext},
		{"env over context", Flags{}, map[string]string{EnvRedis: "redis://env:1/0"}, "redis://env:1/0", SourceEnv},
		{"flag over env", Flags{Redis: str("redis://flag:1/0")}, map[string]string{EnvRedis: "redis://env:1/0"}, "redis://flag:1/0", SourceFlag},
		{"env context switch", Flags{}, map[string]string{EnvContext: "local"}, "redis://127.0.0.1:6390/0", SourceContext},
		{"flag context switch over env", Flags{Context: str("local")}, map[string]string{EnvContext: "prod"}, "redis://127.0.0.1:6390/0", SourceContext},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := map[string]string{}
			for k, v := range env {
				e[k] = v
			}
			for k, v := range c.env {
				e[k] = v
			}
			s, err := Resolve(c.flags, getenv(e))
			if err != nil {
				t.Fatal(err)
			}
			if s.Redis.URL != c.wantURL || s.Sources["redis"] != c.wantSrc {
				t.Fatalf("url %q from %s, want %q from %s", s.Redis.URL, s.Sources["redis"], c.wantURL, c.wantSrc)
			}
		})
	}
}

func TestContextCredentialsStayWithTheContextURL(t *testing.T) {
	_, env := writeConfig(t, sample)
	s, err := Resolve(Flags{Redis: str("redis://elsewhere:6379/0")}, getenv(env))
	if err != nil {
		t.Fatal(err)
	}
	if s.Redis.Password != "" || s.Redis.Username != "" || s.Redis.TLS.CA != "" {
		t.Fatalf("the context's credentials must not go to another server: %+v", s.Redis)
	}
	env[EnvRedisPassword] = "from-env"
	s, err = Resolve(Flags{Redis: str("redis://elsewhere:6379/0")}, getenv(env))
	if err != nil {
		t.Fatal(err)
	}
	if s.Redis.Password != "from-env" {
		t.Fatal("PROTCTL_REDIS_PASSWORD applies to any server")
	}
}

// The Redis user is PROTCTL_REDIS_USERNAME, else the context's (with its
// URL), else the URL's: a user in the URL without a password is a user
// (a nopass ACL user), not nobody.
func TestRedisUserPrecedence(t *testing.T) {
	_, env := writeConfig(t, sample)
	for _, tc := range []struct {
		name  string
		flags Flags
		env   map[string]string
		want  string
	}{
		{"the URL's", Flags{Redis: str("redis://limited@127.0.0.1:6390/0")}, nil, "limited"},
		{"the URL's, with a password", Flags{Redis: str("redis://limited:pw@127.0.0.1:6390/0")}, nil, "limited"},
		{"the unix URL's", Flags{Redis: str("unix://limited@/tmp/redis.sock"), Layout: str("protean")}, nil, "limited"},
		{"the Sentinel URL's", Flags{Redis: str("redis+sentinel://limited@s1,s2/m"), Layout: str("protean")}, nil, "limited"},
		{"none", Flags{Redis: str("redis://127.0.0.1:6390/0")}, nil, ""},
		{"env over the URL's", Flags{Redis: str("redis://limited@127.0.0.1:6390/0")}, map[string]string{EnvRedisUsername: "envuser"}, "envuser"},
		{"the context's over its URL's", Flags{}, nil, "ops"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := map[string]string{}
			for k, v := range env {
				e[k] = v
			}
			for k, v := range tc.env {
				e[k] = v
			}
			s, err := Resolve(tc.flags, getenv(e))
			if err != nil {
				t.Fatal(err)
			}
			if s.Redis.Username != tc.want {
				t.Fatalf("Redis user %q, want %q", s.Redis.Username, tc.want)
			}
		})
	}
}

func TestEnvPasswordBeatsPasswordFile(t *testing.T) {
	_, env := writeConfig(t, sample)
	env[EnvRedisPassword] = "env-pw"
	s, err := Resolve(Flags{}, getenv(env))
	if err != nil {
		t.Fatal(err)
	}
	if s.Redis.Password != "env-pw" {
		t.Fatalf("password %q", s.Redis.Password)
	}
}

func TestReadOnlyPrecedence(t *testing.T) {
	_, env := writeConfig(t, sample) // prod is readOnly
	f := false
	s, err := Resolve(Flags{ReadOnly: &f}, getenv(env))
	if err != nil || s.ReadOnly {
		t.Fatalf("--read-only=false is explicit and wins: %v %v", s.ReadOnly, err)
	}
	env[EnvReadOnly] = "false"
	if s, err = Resolve(Flags{}, getenv(env)); err != nil || s.ReadOnly {
		t.Fatalf("env wins over the context: %v %v", s.ReadOnly, err)
	}
	env[EnvReadOnly] = "maybe"
	if _, err = Resolve(Flags{}, getenv(env)); err == nil {
		t.Fatal("a bad boolean is an error")
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name    string
		content string
		flags   Flags
		want    string
	}{
		{"unknown field", "contexts:\n  - name: a\n    readonly: true\n", Flags{}, "field readonly not found"},
		{"duplicate name", "contexts:\n  - name: a\n  - name: a\n", Flags{}, "defined twice"},
		{"missing name", "contexts:\n  - redis: {url: redis://x}\n", Flags{}, "has no name"},
		{"bad layout", "contexts:\n  - name: a\n    redis: {layout: sharded}\n", Flags{}, "invalid redis.layout"},
		{"current context undefined", "currentContext: b\ncontexts:\n  - name: a\n", Flags{}, "not defined"},
		{"unknown context flag", sample, Flags{Context: str("staging")}, "no such context"},
		{"bad layout flag", sample, Flags{Layout: str("sharded")}, "invalid layout"},
		{"not yaml", "contexts: [", Flags{}, "config:"},
		{"cert without key", sample, Flags{Context: str("local"), RedisTLSCert: str("c.pem")}, "both a cert and a key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, env := writeConfig(t, c.content)
			_, err := Resolve(c.flags, getenv(env))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error containing %q, got %v", c.want, err)
			}
		})
	}
}

func TestExplicitConfigMustExist(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	if _, err := Resolve(Flags{ConfigPath: &missing}, getenv(nil)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("--config naming a missing file: %v", err)
	}
	if _, err := Resolve(Flags{}, getenv(map[string]string{EnvConfig: missing})); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("PROTCTL_CONFIG naming a missing file: %v", err)
	}
	// The default path may be missing.
	if _, err := Resolve(Flags{}, getenv(map[string]string{"XDG_CONFIG_HOME": t.TempDir()})); err != nil {
		t.Fatal(err)
	}
}

func TestDefaultPath(t *testing.T) {
	if got := DefaultPath(getenv(map[string]string{"XDG_CONFIG_HOME": "/x", "HOME": "/h"})); got != filepath.Join("/x", "protctl", "config.yaml") {
		t.Fatalf("XDG: %q", got)
	}
	if got := DefaultPath(getenv(map[string]string{"HOME": "/h"})); got != filepath.Join("/h", ".config", "protctl", "config.yaml") {
		t.Fatalf("HOME: %q", got)
	}
}

func TestSaveRoundTrip(t *testing.T) {
	dir, _ := writeConfig(t, sample)
	f, err := Load(filepath.Join(dir, "protctl", "config.yaml"), true)
	if err != nil {
		t.Fatal(err)
	}
	f.CurrentContext = "local"
	out := filepath.Join(t.TempDir(), "sub", "config.yaml")
	if err := f.Save(out); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(out)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("saved file mode %v, %v", st.Mode(), err)
	}
	back, err := Load(out, true)
	if err != nil {
		t.Fatal(err)
	}
	if back.CurrentContext != "local" || strings.Join(back.Names(), ",") != "prod,local" {
		t.Fatalf("round trip: %+v", back)
	}
	p, _ := back.Context("prod")
	if !p.ReadOnly || p.Redis.PasswordFile != "prod.password" || len(p.Kafka.Brokers) != 2 {
		t.Fatalf("prod after round trip: %+v", p)
	}
}

func TestRedactURL(t *testing.T) {
	cases := map[string]string{
		"redis://user:s3cret@h:6379/0": "redis://user:xxxxx@h:6379/0",
		"redis://h:6379/0":             "redis://h:6379/0",
		"rediss://:pw@h:1/2":           "rediss://:xxxxx@h:1/2",
		"redis://u:p@h:1/0\x7f":        "<unparsable URL>",
	}
	for in, want := range cases {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

const sentinelSample = `currentContext: ha
contexts:
  - name: ha
    redis:
      url: redis+sentinel://s1:26379,s2:26379/mymaster/0
      passwordFile: prod.password
      sentinel: {username: sops, passwordFile: prod.password}
`

// The context's Sentinel credentials, like its other ones, go only to the
// context's own URL; the environment's apply to whichever Sentinel URL is
// used, and none to a URL that is not a Sentinel one.
func TestSentinelCredentials(t *testing.T) {
	dir, env := writeConfig(t, sentinelSample)
	s, err := Resolve(Flags{}, getenv(env))
	if err != nil {
		t.Fatal(err)
	}
	a := s.Redis.Sentinel
	if a.Username != "sops" || a.Password != "s3cret" || a.PasswordFile != filepath.Join(dir, "protctl", "prod.password") ||
		s.Sources["redisSentinelUsername"] != SourceContext || s.Sources["redisSentinelPassword"] != SourceContext {
		t.Fatalf("context's Sentinel auth %+v, sources %v", a, s.Sources)
	}
	if c := s.Redis.Conn(s.Layout); c.SentinelUsername != "sops" || c.SentinelPassword != "s3cret" || c.Password != "s3cret" {
		t.Fatalf("conn %+v", c)
	}

	s, err = Resolve(Flags{Redis: str("redis+sentinel://other:26379/m")}, getenv(env))
	if err != nil {
		t.Fatal(err)
	}
	if s.Redis.Sentinel != (SentinelAuth{}) {
		t.Fatalf("the context's Sentinel credentials went to --redis: %+v", s.Redis.Sentinel)
	}

	env["PROTCTL_REDIS_SENTINEL_USERNAME"] = "envuser"
	env["PROTCTL_REDIS_SENTINEL_PASSWORD"] = "envpw"
	s, err = Resolve(Flags{Redis: str("redis+sentinel://other:26379/m")}, getenv(env))
	if err != nil {
		t.Fatal(err)
	}
	if a := s.Redis.Sentinel; a.Username != "envuser" || a.Password != "envpw" || a.PasswordFile != "" || s.Sources["redisSentinelPassword"] != SourceEnv {
		t.Fatalf("env Sentinel auth %+v", a)
	}
	s, err = Resolve(Flags{Redis: str("redis://plain:6379/0")}, getenv(env))
	if err != nil {
		t.Fatal(err)
	}
	if s.Redis.Sentinel != (SentinelAuth{}) {
		t.Fatalf("Sentinel credentials on a plain URL: %+v", s.Redis.Sentinel)
	}
}

// A contexts file whose Redis section is inconsistent is refused when
// loaded, naming the context and the field.
func TestSentinelContextErrors(t *testing.T) {
	for _, tc := range []struct{ name, redis, want string }{
		{"no master", "url: redis+sentinel://s1:26379", "redis.url"},
		{"cluster", "url: redis+sentinel://s1:26379/m\n      layout: cluster", "redis.layout"},
		{"credentials without a Sentinel URL", "url: redis://h:6379/0\n      sentinel: {username: x}", "redis.sentinel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, env := writeConfig(t, "contexts:\n  - name: ha\n    redis:\n      "+tc.redis+"\n")
			_, err := Resolve(Flags{}, getenv(env))
			if err == nil || !strings.Contains(err.Error(), `context "ha"`) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want it to name context ha and %s", err, tc.want)
			}
		})
	}
}

// A configuration error caused by an environment variable names the
// variable, as the flag or the context's field is named otherwise.
func TestEnvErrorsNameTheVariable(t *testing.T) {
	missing := filepath.Join(os.TempDir(), "protctl-config-test-missing")
	kafka := map[string]string{EnvKafka: "k1:9092"}
	sasl := map[string]string{EnvKafka: "k1:9092", EnvKafkaMechanism: "PLAIN", EnvKafkaUsername: "u"}
	for _, tc := range []struct {
		env  string
		val  string
		with map[string]string
	}{
		{EnvConfig, missing, nil},
		{EnvContext, "nope", nil},
		{EnvRedis, "http://127.0.0.1:6390", nil},
		{EnvRedisPasswordFile, missing, nil},
		{EnvRedisTLSCA, missing, nil},
		{EnvRedisTLSCert, missing, nil},
		{EnvRedisTLSKey, missing, nil},
		{EnvRedisSentinelPasswordFile, missing, map[string]string{EnvRedis: "redis+sentinel://s1/m"}},
		{EnvKafkaTLS, "maybe", kafka},
		{EnvKafkaTLSCA, missing, kafka},
		{EnvKafkaTLSCert, missing, kafka},
		{EnvKafkaTLSKey, missing, kafka},
		{EnvKafkaMechanism, "GSSAPI", map[string]string{EnvKafka: "k1:9092", EnvKafkaUsername: "u"}},
		{EnvKafkaUsername, "u", kafka},
		{EnvKafkaPasswordFile, missing, sasl},
		{EnvLayout, "bogus", nil},
		{EnvReadOnly, "maybe", nil},
	} {
		// Lower case: the temporary paths in the errors hold the test's
		// name, which must not pass for the variable's.
		t.Run(strings.ToLower(tc.env), func(t *testing.T) {
			_, env := writeConfig(t, "contexts:\n  - name: a\n")
			for k, v := range tc.with {
				env[k] = v
			}
			env[tc.env] = tc.val
			_, err := Resolve(Flags{}, getenv(env))
			if err == nil {
				t.Fatalf("%s=%s: no error", tc.env, tc.val)
			}
			if !strings.Contains(err.Error(), tc.env) {
				t.Fatalf("%s=%s: the error does not name the variable: %v", tc.env, tc.val, err)
			}
		})
	}
}
