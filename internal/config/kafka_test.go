package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/protctl/protctl/internal/config/security"
	"github.com/protctl/protctl/internal/testenv"
)

// kafkaSample is a context whose Kafka uses TLS with a CA and a client
// certificate and SASL SCRAM with a password file, all relative to the
// contexts file's directory.
const kafkaSample = `currentContext: prod
contexts:
  - name: prod
    kafka:
      brokers: [k1:9093]
      tls: {ca: ca.pem, cert: client.pem, key: client-key.pem, serverName: kafka.prod}
      sasl: {mechanism: scram-sha-512, username: ops, passwordFile: kafka.password}
  - name: plain
    kafka: {brokers: [k2:9092]}
`

// writeKafkaConfig writes content and the PKI's files and a Kafka
// password file next to it.
func writeKafkaConfig(t *testing.T, content string) (dir string, env map[string]string) {
	t.Helper()
	dir, env = writeConfig(t, content)
	pki := testenv.NewPKI(t)
	for src, dst := range map[string]string{pki.CA: "ca.pem", pki.ClientCert: "client.pem", pki.ClientKey: "client-key.pem"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "protctl", dst), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "protctl", "kafka.password"), []byte("kafka-s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, env
}

func TestConfigKafkaSecurityFromContext(t *testing.T) {
	dir, env := writeKafkaConfig(t, kafkaSample)
	s, err := Resolve(Flags{}, getenv(env))
	if err != nil {
		t.Fatal(err)
	}
	p := func(name string) string { return filepath.Join(dir, "protctl", name) }
	if s.KafkaTLS.CA != p("ca.pem") || s.KafkaTLS.Cert != p("client.pem") || s.KafkaTLS.Key != p("client-key.pem") || s.KafkaTLS.ServerName != "kafka.prod" || !s.KafkaTLS.On() {
		t.Fatalf("TLS (paths relative to the file): %+v", s.KafkaTLS)
	}
	if s.KafkaSASL.Mechanism != "SCRAM-SHA-512" || s.KafkaSASL.Username != "ops" || s.KafkaSASL.Password != "kafka-s3cret" || s.KafkaSASL.PasswordFile != p("kafka.password") {
		t.Fatalf("SASL (mechanism normalised, password from the file without its newline): %+v", s.KafkaSASL)
	}
	if s.Sources["kafkaTls"] != SourceContext || s.Sources["kafkaSasl"] != SourceContext {
		t.Fatalf("sources: %v", s.Sources)
	}

	// A context without the sections has neither.
	s, err = Resolve(Flags{Context: str("plain")}, getenv(env))
	if err != nil {
		t.Fatal(err)
	}
	if s.KafkaTLS.On() || s.KafkaSASL.Mechanism != "" || s.Sources["kafkaTls"] != "" || s.Sources["kafkaSasl"] != "" {
		t.Fatalf("plain context: TLS %+v SASL %+v sources %v", s.KafkaTLS, s.KafkaSASL, s.Sources)
	}
}

func TestConfigKafkaSecurityPrecedence(t *testing.T) {
	dir, env := writeKafkaConfig(t, kafkaSample)
	other := filepath.Join(dir, "other.password")
	if err := os.WriteFile(other, []byte("other-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "protctl", "ca.pem")
	yes := true
	cases := []struct {
		name      string
		flags     Flags
		env       map[string]string
		mechanism string
		user      string
		password  string
		saslSrc   Source
		serverNm  string
	}{
		{"context", Flags{}, nil, "SCRAM-SHA-512", "ops", "kafka-s3cret", SourceContext, "kafka.prod"},
		{"env over context", Flags{}, map[string]string{
			EnvKafkaMechanism: "SCRAM-SHA-256", EnvKafkaUsername: "env-user", EnvKafkaPassword: "env-pw", EnvKafkaTLSServer: "env.name",
		}, "SCRAM-SHA-256", "env-user", "env-pw", SourceEnv, "env.name"},
		{"password file from env", Flags{}, map[string]string{EnvKafkaPasswordFile: other}, "SCRAM-SHA-512", "ops", "other-file", SourceContext, "kafka.prod"},
		{"env password over env file", Flags{}, map[string]string{EnvKafkaPasswordFile: other, EnvKafkaPassword: "env-pw"}, "SCRAM-SHA-512", "ops", "env-pw", SourceContext, "kafka.prod"},
		{"flag over env", Flags{KafkaSASLMechanism: str("plain"), KafkaUsername: str("flag-user")}, map[string]string{
			EnvKafkaMechanism: "SCRAM-SHA-256", EnvKafkaUsername: "env-user",
		}, "PLAIN", "flag-user", "kafka-s3cret", SourceFlag, "kafka.prod"},
		// Brokers from elsewhere: nothing of the context's goes there.
		{"brokers from a flag, env credentials", Flags{Kafka: str("elsewhere:9092"), KafkaTLS: &yes, KafkaTLSCA: &ca}, map[string]string{
			EnvKafkaMechanism: "PLAIN", EnvKafkaUsername: "u", EnvKafkaPassword: "env-pw",
		}, "PLAIN", "u", "env-pw", SourceEnv, ""},
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
			a := s.KafkaSASL
			if a.Mechanism != c.mechanism || a.Username != c.user || a.Password != c.password || s.Sources["kafkaSasl"] != c.saslSrc {
				t.Fatalf("SASL %s %s %q from %s, want %s %s %q from %s", a.Mechanism, a.Username, a.Password, s.Sources["kafkaSasl"], c.mechanism, c.user, c.password, c.saslSrc)
			}
			if s.KafkaTLS.ServerName != c.serverNm {
				t.Fatalf("server name %q, want %q", s.KafkaTLS.ServerName, c.serverNm)
			}
		})
	}
}

// The context's TLS files and SASL credentials go only to the context's
// own brokers, as its Redis credentials go only to its Redis.
func TestConfigKafkaContextCredentialsStayWithTheContextBrokers(t *testing.T) {
	_, env := writeKafkaConfig(t, kafkaSample)
	for name, fl := range map[string]Flags{"flag": {Kafka: str("elsewhere:9092")}, "env": {}} {
		t.Run(name, func(t *testing.T) {
			e := map[string]string{}
			for k, v := range env {
				e[k] = v
			}
			if name == "env" {
				e[EnvKafka] = "elsewhere:9092"
			}
			s, err := Resolve(fl, getenv(e))
			if err != nil {
				t.Fatal(err)
			}
			if s.KafkaTLS.On() || s.KafkaSASL != (security.SASL{}) {
				t.Fatalf("the context's Kafka credentials went to another cluster: TLS %+v SASL %s %s password set %v", s.KafkaTLS, s.KafkaSASL.Mechanism, s.KafkaSASL.Username, s.KafkaSASL.Password != "")
			}
		})
	}
}

func TestConfigKafkaSecurityErrors(t *testing.T) {
	cases := []struct {
		name    string
		content string
		flags   Flags
		env     map[string]string
		want    []string
	}{
		{"unknown mechanism in the file", "contexts:\n  - name: a\n    kafka: {brokers: [k:1], sasl: {mechanism: GSSAPI, username: u}}\n", Flags{}, nil,
			[]string{`context "a"`, "kafka.sasl.mechanism", `got "GSSAPI"`, "SCRAM-SHA-512"}},
		{"sasl without a username in the file", "contexts:\n  - name: a\n    kafka: {brokers: [k:1], sasl: {mechanism: PLAIN}}\n", Flags{}, nil,
			[]string{"kafka.sasl.username"}},
		{"cert without key in the file", "contexts:\n  - name: a\n    kafka: {brokers: [k:1], tls: {cert: c.pem}}\n", Flags{}, nil,
			[]string{`context "a"`, "kafka.tls.key", "cert and key go together"}},
		{"unknown field in the file", "contexts:\n  - name: a\n    kafka: {brokers: [k:1], sasl: {mechanism: PLAIN, username: u, password: x}}\n", Flags{}, nil,
			[]string{"field password not found"}},
		{"unknown mechanism from env", kafkaSample, Flags{}, map[string]string{EnvKafkaMechanism: "OAUTHBEARER"},
			[]string{EnvKafkaMechanism, `got "OAUTHBEARER"`}},
		{"unknown mechanism from a flag", kafkaSample, Flags{KafkaSASLMechanism: str("md5")}, nil,
			[]string{"--kafka-sasl-mechanism", `got "md5"`}},
		{"cert flag without key", kafkaSample, Flags{Kafka: str("k:1"), KafkaTLSCert: str("c.pem")}, nil,
			[]string{"--kafka-tls-cert", "needs a key", "--kafka-tls-key"}},
		{"key env without cert", kafkaSample, Flags{Kafka: str("k:1")}, map[string]string{EnvKafkaTLSKey: "k.pem"},
			[]string{EnvKafkaTLSKey, "needs a certificate"}},
		{"unreadable CA from a flag", kafkaSample, Flags{KafkaTLSCA: str("/nonexistent/ca.pem")}, nil,
			[]string{"Kafka TLS ca", "--kafka-tls-ca", "no such file"}},
		{"CA that is not PEM from env", kafkaSample, Flags{}, map[string]string{EnvKafkaTLSCA: "/dev/null"},
			[]string{"Kafka TLS ca", EnvKafkaTLSCA, "no PEM certificate"}},
		{"bad TLS boolean", kafkaSample, Flags{}, map[string]string{EnvKafkaTLS: "sometimes"},
			[]string{EnvKafkaTLS, "true or false"}},
		{"username without mechanism", "contexts:\n  - name: a\n", Flags{Kafka: str("k:1"), KafkaUsername: str("u")}, nil,
			[]string{"--kafka-username", "needs a mechanism"}},
		{"mechanism without username", "contexts:\n  - name: a\n", Flags{Kafka: str("k:1"), KafkaSASLMechanism: str("PLAIN")}, map[string]string{EnvKafkaPassword: "pw"},
			[]string{"needs a username", "--kafka-username"}},
		{"no password", "contexts:\n  - name: a\n", Flags{Kafka: str("k:1"), KafkaSASLMechanism: str("PLAIN"), KafkaUsername: str("u")}, nil,
			[]string{"needs a password", EnvKafkaPassword, "no flag"}},
		{"missing password file", kafkaSample, Flags{}, map[string]string{EnvKafkaPasswordFile: "/nonexistent/pw"},
			[]string{"Kafka password file", EnvKafkaPasswordFile, "no such file"}},
		{"password file is a directory", kafkaSample, Flags{}, map[string]string{EnvKafkaPasswordFile: "/"},
			[]string{"Kafka password file", "not a regular file"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, env := writeKafkaConfig(t, c.content)
			for k, v := range c.env {
				env[k] = v
			}
			_, err := Resolve(c.flags, getenv(env))
			if err == nil {
				t.Fatalf("no error, want one containing %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "kafka-s3cret") {
				t.Errorf("the error holds the password: %v", err)
			}
		})
	}
}

// Without brokers nothing dials Kafka, so its settings are not resolved:
// the node's PROTCTL_KAFKA_PASSWORD in the shell, or a stray username,
// must not break Redis-only commands.
func TestConfigKafkaSecurityIgnoredWithoutBrokers(t *testing.T) {
	s, err := Resolve(Flags{KafkaUsername: str("u")}, getenv(map[string]string{"HOME": t.TempDir(), EnvKafkaPassword: "pw"}))
	if err != nil {
		t.Fatal(err)
	}
	if s.KafkaSASL.Username != "" || s.KafkaSASL.Password != "" {
		t.Fatalf("SASL without brokers: %+v", s.KafkaSASL.Username)
	}
}

// context use rewrites the file: the Kafka sections survive, and no
// resolved secret is ever written into it.
func TestConfigKafkaSaveRoundTrip(t *testing.T) {
	dir, env := writeKafkaConfig(t, kafkaSample)
	path := filepath.Join(dir, "protctl", "config.yaml")
	if _, err := Resolve(Flags{}, getenv(env)); err != nil {
		t.Fatal(err)
	}
	f, err := Load(path, true)
	if err != nil {
		t.Fatal(err)
	}
	f.Contexts[0].Kafka.SASL.Password = "kafka-s3cret" // as if resolved into it
	f.CurrentContext = "plain"
	if err := f.Save(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "kafka-s3cret") {
		t.Fatalf("the password was written:\n%s", b)
	}
	back, err := Load(path, true)
	if err != nil {
		t.Fatal(err)
	}
	k := back.Contexts[0].Kafka
	if k.TLS.CA != "ca.pem" || k.TLS.ServerName != "kafka.prod" || k.SASL.Mechanism != "scram-sha-512" || k.SASL.PasswordFile != "kafka.password" {
		t.Fatalf("after the round trip: %+v", k)
	}
	if strings.Count(string(b), "tls:") != 1 || strings.Count(string(b), "sasl:") != 1 {
		t.Fatalf("empty tls or sasl sections written for context plain:\n%s", b)
	}
}
