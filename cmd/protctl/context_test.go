package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/protctl/protctl/internal/testenv"
)

const twoContexts = `currentContext: prod
contexts:
  - name: prod
    redis:
      url: rediss://ops:inline-secret@redis.prod:6380/0
      layout: cluster
      passwordFile: prod.password
    kafka: {brokers: [k1:9092]}
    categories: [shop::order]
    readOnly: true
    protected: true
  - name: local
    redis: {url: "redis://127.0.0.1:6390/0"}
`

func cliWithConfig(t *testing.T, content string) (*cli, string) {
	t.Helper()
	cl := newCLI(t)
	path := cl.env["XDG_CONFIG_HOME"] + "/protctl/config.yaml"
	writeFile(t, path, content)
	writeFile(t, cl.env["XDG_CONFIG_HOME"]+"/protctl/prod.password", "file-secret\n")
	return cl, path
}

func TestContextList(t *testing.T) {
	cl, _ := cliWithConfig(t, twoContexts)
	r := cl.run("context", "ls")
	r.wantCode(t, 0)
	want := "CURRENT   NAME    REDIS                                  LAYOUT    READ-ONLY   PROTECTED\n" +
		"*         prod    rediss://ops:xxxxx@redis.prod:6380/0   cluster   yes         yes\n" +
		"          local   redis://127.0.0.1:6390/0               protean   no          no\n"
	if r.stdout != want {
		t.Fatalf("context ls:\n%s\nwant:\n%s", r.stdout, want)
	}

	r = cl.run("context", "ls", "-o", "json")
	r.wantCode(t, 0)
	if strings.Contains(r.stdout, "inline-secret") {
		t.Fatal("a password in a URL was printed")
	}
	var doc struct {
		Kind  string           `json:"kind"`
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || doc.Kind != "ContextList" || len(doc.Items) != 2 {
		t.Fatalf("json: %v %+v", err, doc)
	}
	if doc.Items[1]["current"] != false || doc.Items[1]["redis"].(map[string]any)["username"] != nil {
		t.Fatalf("local: %v", doc.Items[1])
	}
}

func TestContextListWithoutFile(t *testing.T) {
	r := newCLI(t).run("context", "ls")
	r.wantCode(t, 0)
	if r.stdout != "" || !strings.Contains(r.stderr, "No contexts in") {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
}

func TestContextUseAndCurrent(t *testing.T) {
	cl, path := cliWithConfig(t, twoContexts)
	r := cl.run("context", "current")
	r.wantCode(t, 0)
	if r.stdout != "prod\n" {
		t.Fatalf("current %q", r.stdout)
	}
	// Switching works in read-only mode: it only changes the local file.
	cl.run("context", "use", "local", "--read-only").wantCode(t, 0)
	r = cl.run("context", "current", "-o", "json")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, `"name": "local"`) {
		t.Fatalf("current after use: %s", r.stdout)
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), "currentContext: local") || !strings.Contains(string(b), "passwordFile: prod.password") {
		t.Fatalf("file after use:\n%s", b)
	}
	r = cl.run("context", "use", "staging")
	r.wantCode(t, 4)
	if !strings.Contains(r.stderr, `no such context "staging"`) {
		t.Fatalf("stderr %q", r.stderr)
	}
}

func TestContextCurrentUnsetExits4(t *testing.T) {
	cl, _ := cliWithConfig(t, "contexts:\n  - name: a\n")
	cl.run("context", "current").wantCode(t, 4)
}

func TestConfigViewShowsSourcesNotSecrets(t *testing.T) {
	cl, _ := cliWithConfig(t, twoContexts)
	cl.env["PROTCTL_LAYOUT"] = "protean"
	r := cl.run("config", "view", "-o", "json")
	r.wantCode(t, 0)
	if strings.Contains(r.stdout, "inline-secret") || strings.Contains(r.stdout, "file-secret") {
		t.Fatalf("a secret was printed:\n%s", r.stdout)
	}
	var v struct {
		Kind     string            `json:"kind"`
		Context  string            `json:"context"`
		Layout   string            `json:"layout"`
		Redis    map[string]any    `json:"redis"`
		Sources  map[string]string `json:"sources"`
		ReadOnly bool              `json:"readOnly"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatal(err)
	}
	if v.Kind != "Config" || v.Context != "prod" || v.Layout != "protean" || v.Redis["passwordSet"] != true || !v.ReadOnly {
		t.Fatalf("config view: %+v", v)
	}
	if v.Sources["layout"] != "env" || v.Sources["redis"] != "context" || v.Sources["readOnly"] != "context" {
		t.Fatalf("sources: %v", v.Sources)
	}

	r = cl.run("config", "view", "--context", "local", "--redis", "redis://127.0.0.1:6399/1")
	r.wantCode(t, 0)
	for _, want := range []string{"Context:         local (flag)", "Redis:           redis://127.0.0.1:6399/1 (flag)", "Redis password:  not set"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("config view lacks %q:\n%s", want, r.stdout)
		}
	}
}

const kafkaContext = `currentContext: prod
contexts:
  - name: prod
    redis: {url: "redis://127.0.0.1:6390/0"}
    kafka:
      brokers: [k1:9093, k2:9093]
      tls: {ca: ca.pem, serverName: kafka.prod}
      sasl: {mechanism: scram-sha-512, username: ops, passwordFile: kafka.password}
  - name: local
    redis: {url: "redis://127.0.0.1:6391/0"}
`

// config view shows the Kafka TLS and SASL settings in force and where
// they came from; the password only as set, in every format, and context
// use keeps the sections without writing a password into the file.
func TestConfigViewKafkaSecurity(t *testing.T) {
	const secret = "kafka-view-Pa55-5e1f"
	pki := testenv.NewPKI(t)
	cl, path := cliWithConfig(t, kafkaContext)
	dir := cl.env["XDG_CONFIG_HOME"] + "/protctl/"
	caPEM, err := os.ReadFile(pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir+"ca.pem", string(caPEM))
	writeFile(t, dir+"kafka.password", secret+"\n")

	for _, format := range []string{"table", "json", "yaml"} {
		r := cl.run("config", "view", "-o", format)
		r.wantCode(t, 0)
		noSecret(t, "config view -o "+format, r.stdout+r.stderr, secret)
	}
	r := cl.run("config", "view", "-o", "json")
	var v struct {
		Kafka struct {
			Brokers []string `json:"brokers"`
			TLS     *struct {
				CA         string `json:"ca"`
				ServerName string `json:"serverName"`
			} `json:"tls"`
			SASL *struct {
				Mechanism    string  `json:"mechanism"`
				Username     string  `json:"username"`
				PasswordSet  bool    `json:"passwordSet"`
				PasswordFile *string `json:"passwordFile"`
			} `json:"sasl"`
		} `json:"kafka"`
		Sources map[string]string `json:"sources"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatal(err)
	}
	k := v.Kafka
	if len(k.Brokers) != 2 || k.TLS == nil || k.TLS.CA != dir+"ca.pem" || k.TLS.ServerName != "kafka.prod" {
		t.Fatalf("kafka tls: %s", r.stdout)
	}
	if k.SASL == nil || k.SASL.Mechanism != "SCRAM-SHA-512" || k.SASL.Username != "ops" || !k.SASL.PasswordSet || k.SASL.PasswordFile == nil || *k.SASL.PasswordFile != dir+"kafka.password" {
		t.Fatalf("kafka sasl: %s", r.stdout)
	}
	if v.Sources["kafkaTls"] != "context" || v.Sources["kafkaSasl"] != "context" {
		t.Fatalf("sources: %v", v.Sources)
	}

	r = cl.run("config", "view")
	for _, want := range []string{
		"Kafka TLS:       on (ca " + dir + "ca.pem, server name kafka.prod) (context)",
		"Kafka SASL:      SCRAM-SHA-512 as ops, password set (file " + dir + "kafka.password) (context)",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("config view lacks %q:\n%s", want, r.stdout)
		}
	}

	// The password from the environment, the user from a flag.
	cl.env["PROTCTL_KAFKA_PASSWORD"] = secret + "-env"
	r = cl.run("config", "view", "--kafka-username", "flag-user", "--kafka-sasl-mechanism", "PLAIN", "-o", "json")
	r.wantCode(t, 0)
	noSecret(t, "config view with PROTCTL_KAFKA_PASSWORD", r.stdout+r.stderr, secret)
	if !strings.Contains(r.stdout, `"username": "flag-user"`) || !strings.Contains(r.stdout, `"passwordFile": null`) || !strings.Contains(r.stdout, `"kafkaSasl": "flag"`) {
		t.Fatalf("config view with flags and env:\n%s", r.stdout)
	}

	// Without brokers there is nothing to show: no TLS or SASL line in
	// the table (docs/cli.md, config view), null in JSON.
	r = cl.run("config", "view", "--context", "local")
	r.wantCode(t, 0)
	if strings.Contains(r.stdout, "Kafka TLS") || strings.Contains(r.stdout, "Kafka SASL") || !strings.Contains(r.stdout, "Kafka:           -") {
		t.Fatalf("config view without Kafka:\n%s", r.stdout)
	}
	r = cl.run("config", "view", "--context", "local", "-o", "json")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, `"tls": null,
    "sasl": null`) {
		t.Fatalf("config view -o json without Kafka:\n%s", r.stdout)
	}

	for _, args := range [][]string{{"context", "ls", "-o", "json"}, {"context", "ls", "-o", "wide"}, {"context", "use", "local"}} {
		r := cl.run(args...)
		r.wantCode(t, 0)
		noSecret(t, strings.Join(args, " "), r.stdout+r.stderr, secret)
	}
	b, _ := os.ReadFile(path)
	noSecret(t, "the contexts file after context use", string(b), secret)
	if !strings.Contains(string(b), "passwordFile: kafka.password") || !strings.Contains(string(b), "serverName: kafka.prod") {
		t.Fatalf("context use lost the Kafka sections:\n%s", b)
	}
}

// Bad Kafka security in the contexts file is a config error (exit 2) for
// any command that reads the settings, naming the context and the field.
func TestConfigViewKafkaSecurityErrorsExit2(t *testing.T) {
	cases := []struct {
		name, content, want string
	}{
		{"unknown mechanism", "contexts:\n  - name: a\n    kafka: {brokers: [k:1], sasl: {mechanism: GSSAPI, username: u}}\n", `context "a": kafka.sasl.mechanism: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got "GSSAPI"`},
		{"cert without key", "contexts:\n  - name: a\n    kafka: {brokers: [k:1], tls: {cert: c.pem}}\n", `context "a": kafka.tls.key: cert and key go together`},
		{"unreadable CA", "currentContext: a\ncontexts:\n  - name: a\n    kafka: {brokers: [k:1], tls: {ca: nope.pem}}\n", `Kafka TLS ca (kafka.tls.ca of context "a")`},
		{"unreadable password file", "currentContext: a\ncontexts:\n  - name: a\n    kafka: {brokers: [k:1], sasl: {mechanism: PLAIN, username: u, passwordFile: nope}}\n", `Kafka password file (kafka.sasl.passwordFile of context "a")`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl, _ := cliWithConfig(t, c.content)
			r := cl.run("config", "view")
			r.wantCode(t, 2)
			if !strings.Contains(r.stderr, c.want) || r.stdout != "" {
				t.Fatalf("want an error containing %q; stdout %q stderr:\n%s", c.want, r.stdout, r.stderr)
			}
		})
	}
}

// config view -o json says null for what is not set, never "" (docs/cli.md,
// "Unknown values are null"): the Redis TLS files among them.
func TestConfigViewAbsentIsNull(t *testing.T) {
	cl, _ := cliWithConfig(t, twoContexts)
	for _, args := range [][]string{
		{"config", "view", "-o", "json"},
		{"config", "view", "--context", "local", "-o", "json"},
		{"config", "view", "--redis", "redis://127.0.0.1:6399/1", "-o", "json"},
	} {
		r := cl.run(args...)
		r.wantCode(t, 0)
		var doc any
		if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
			t.Fatal(err)
		}
		var walk func(path string, v any)
		walk = func(path string, v any) {
			switch v := v.(type) {
			case map[string]any:
				for k, e := range v {
					walk(path+"."+k, e)
				}
			case []any:
				for i, e := range v {
					walk(fmt.Sprintf("%s[%d]", path, i), e)
				}
			case string:
				if v == "" {
					t.Errorf("%v: %s is \"\", want null:\n%s", args, path, r.stdout)
				}
			}
		}
		walk("", doc)
	}
	ca := testenv.NewPKI(t).CA
	r := cl.run("config", "view", "--context", "local", "--redis-tls-ca", ca, "-o", "json")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, `"tls": {
      "ca": "`+ca+`",
      "cert": null,
      "key": null
    }`) {
		t.Fatalf("redis.tls with a CA:\n%s", r.stdout)
	}
}
