package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/testenv"
)

const commentedContexts = `# protctl contexts, kept by hand
currentContext: prod
contexts:
  # prod: careful
  - name: prod # the real one
    redis: {url: "redis://127.0.0.1:6390/0", passwordFile: prod.password}
    readOnly: true
  - name: local
    redis: {url: "redis://127.0.0.1:6391/0"}
`

func readConfig(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// context add stores the connection flags and FIELD=VALUE arguments in a
// new context, atomically with mode 0600, keeping the other contexts and
// their comments; an existing name needs --force.
func TestContextAdd(t *testing.T) {
	cl, path := cliWithConfig(t, commentedContexts)
	r := cl.run("context", "add", "staging", "--redis", "rediss://ops@redis.staging:6380/0", "--layout", "cluster",
		"--kafka", "k1:9093,k2:9093", "--category", "shop::order", "--category", "shop::payment",
		"redis.passwordFile=~/.config/protctl/staging.password", "protected=true", "-o", "json")
	r.wantCode(t, 0)
	var item struct {
		Kind  string `json:"kind"`
		Name  string `json:"name"`
		Redis struct {
			URL, Layout, Username, PasswordFile string
		} `json:"redis"`
		Kafka      struct{ Brokers []string } `json:"kafka"`
		Categories []string                   `json:"categories"`
		Protected  bool                       `json:"protected"`
		ReadOnly   bool                       `json:"readOnly"`
		Current    bool                       `json:"current"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &item); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	if item.Kind != "Context" || item.Name != "staging" || item.Redis.URL != "rediss://ops@redis.staging:6380/0" ||
		item.Redis.Layout != "cluster" || item.Redis.Username != "" || item.Redis.PasswordFile != "~/.config/protctl/staging.password" ||
		strings.Join(item.Kafka.Brokers, ",") != "k1:9093,k2:9093" || strings.Join(item.Categories, ",") != "shop::order,shop::payment" ||
		!item.Protected || item.ReadOnly || item.Current {
		t.Fatalf("added: %+v", item)
	}
	got := readConfig(t, path)
	for _, want := range []string{"# protctl contexts, kept by hand", "# prod: careful", "# the real one", "currentContext: prod",
		"name: local", "url: rediss://ops@redis.staging:6380/0", "layout: cluster", "- k2:9093", "- shop::payment", "protected: true"} {
		if !strings.Contains(got, want) {
			t.Errorf("file lacks %q:\n%s", want, got)
		}
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode: %v %v", st.Mode(), err)
	}
	r = cl.run("context", "ls")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, "staging   rediss://ops@redis.staging:6380/0") {
		t.Fatalf("ls:\n%s", r.stdout)
	}

	// An existing name is refused, the file unchanged; --force replaces it whole.
	before := readConfig(t, path)
	r = cl.run("context", "add", "staging", "--redis", "redis://127.0.0.1:6392/0")
	r.wantCode(t, clierr.ExitUsage)
	if !strings.Contains(r.stderr, `context "staging" already exists`) || !strings.Contains(r.stderr, "--force") {
		t.Fatalf("stderr %q", r.stderr)
	}
	if readConfig(t, path) != before {
		t.Fatal("a refused add changed the file")
	}
	r = cl.run("context", "add", "staging", "--redis", "redis://127.0.0.1:6392/0", "--force", "--use")
	r.wantCode(t, 0)
	got = readConfig(t, path)
	if strings.Contains(got, "redis.staging") || strings.Contains(got, "shop::payment") || !strings.Contains(got, "currentContext: staging") ||
		!strings.Contains(got, "# prod: careful") {
		t.Fatalf("after --force --use:\n%s", got)
	}
	entries, _ := os.ReadDir(cl.env["XDG_CONFIG_HOME"] + "/protctl")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".config-") {
			t.Fatalf("temporary file left behind: %s", e.Name())
		}
	}
}

// A context added without a file creates the file.
func TestContextAddCreatesFile(t *testing.T) {
	cl := newCLI(t)
	cl.run("context", "add", "local", "--redis", "redis://127.0.0.1:6390/0", "--use").wantCode(t, 0)
	r := cl.run("context", "current")
	r.wantCode(t, 0)
	if r.stdout != "local\n" {
		t.Fatalf("current %q", r.stdout)
	}
}

// context set changes only the fields it names (an empty value clears
// one), keeps the rest and the other contexts' comments, and exits 4 for
// a context that does not exist.
func TestContextSet(t *testing.T) {
	cl, path := cliWithConfig(t, commentedContexts)
	r := cl.run("context", "set", "prod", "readOnly=false", "categories=shop::order,shop::payment",
		"--kafka", "k1:9092", "kafka.sasl.mechanism=scram-sha-512", "kafka.sasl.username=ops", "redis.passwordFile=")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, "Categories:     shop::order,shop::payment") || !strings.Contains(r.stdout, "Read-only:      no") {
		t.Fatalf("set output:\n%s", r.stdout)
	}
	got := readConfig(t, path)
	for _, want := range []string{"# protctl contexts, kept by hand", "url: redis://127.0.0.1:6390/0", "- shop::payment", "- k1:9092",
		"mechanism: scram-sha-512", "username: ops", "name: local"} {
		if !strings.Contains(got, want) {
			t.Errorf("file lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "readOnly") || strings.Contains(got, "prod.password") {
		t.Fatalf("fields not changed:\n%s", got)
	}
	r = cl.run("context", "set", "staging", "readOnly=true")
	r.wantCode(t, clierr.ExitNotFound)
	if !strings.Contains(r.stderr, `no such context "staging"`) {
		t.Fatalf("stderr %q", r.stderr)
	}
	cl.run("context", "set", "prod").wantCode(t, clierr.ExitUsage)
}

// Bad input to add and set exits 2 (USAGE) with a message naming the
// flag or argument and the field, and leaves the file byte for byte as it
// was. Passwords are refused: a URL with one, or a password field.
func TestContextEditValidation(t *testing.T) {
	cl, path := cliWithConfig(t, commentedContexts)
	before := readConfig(t, path)
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"unknown field", []string{"context", "set", "prod", "readonly=true"}, []string{"argument readonly", "invalid context field", "readOnly"}},
		{"not FIELD=VALUE", []string{"context", "set", "prod", "readOnly"}, []string{"argument readOnly", "FIELD=VALUE"}},
		{"bad URL scheme", []string{"context", "add", "s", "--redis", "http://redis:6379"}, []string{"--redis", "redis.url", "rediss://"}},
		{"URL without host", []string{"context", "set", "prod", "redis.url=redis://"}, []string{"redis.url", "redis://host:port/db"}},
		{"password in URL", []string{"context", "add", "s", "--redis", "redis://ops:hunter2@redis:6379/0"}, []string{"--redis", "redis.passwordFile", "PROTCTL_REDIS_PASSWORD"}},
		{"password field", []string{"context", "set", "prod", "kafka.sasl.password=hunter2"}, []string{"kafka.sasl.password", "passwordFile"}},
		{"bad layout", []string{"context", "add", "s", "--redis", "redis://r:1/0", "--layout", "flat"}, []string{"--layout", "protean or cluster"}},
		{"bad bool", []string{"context", "set", "prod", "protected=maybe"}, []string{"protected", "true or false"}},
		{"bad mechanism", []string{"context", "set", "prod", "kafka.sasl.mechanism=MD5", "kafka.sasl.username=u"}, []string{"kafka.sasl.mechanism", "nothing was written"}},
		{"mechanism without user", []string{"context", "add", "s", "kafka.sasl.mechanism=PLAIN"}, []string{"kafka.sasl.username"}},
		{"bad name", []string{"context", "add", "readOnly=true"}, []string{"NAME"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, format := range []string{"table", "json"} {
				r := cl.run(append(c.args, "-o", format)...)
				r.wantCode(t, clierr.ExitUsage)
				for _, w := range c.want {
					if !strings.Contains(r.stderr, w) {
						t.Errorf("-o %s: stderr lacks %q:\n%s", format, w, r.stderr)
					}
				}
				if strings.Contains(r.stdout+r.stderr, "hunter2") {
					t.Error("a password was printed")
				}
				if readConfig(t, path) != before {
					t.Fatal("bad input changed the file")
				}
			}
		})
	}
}

// context delete removes a context, keeping the others; the current one
// is refused (exit 6) unless --force, which also clears currentContext;
// an unknown name exits 4.
func TestContextDelete(t *testing.T) {
	cl, path := cliWithConfig(t, commentedContexts)
	cl.run("context", "delete", "local").wantCode(t, 0)
	got := readConfig(t, path)
	if strings.Contains(got, "name: local") || !strings.Contains(got, "# prod: careful") || !strings.Contains(got, "passwordFile: prod.password") {
		t.Fatalf("after delete local:\n%s", got)
	}
	cl.run("context", "delete", "local").wantCode(t, clierr.ExitNotFound)

	before := readConfig(t, path)
	r := cl.run("context", "delete", "prod")
	r.wantCode(t, clierr.ExitRefused)
	if !strings.Contains(r.stderr, "current context") || !strings.Contains(r.stderr, "--force") || readConfig(t, path) != before {
		t.Fatalf("refused delete: %q", r.stderr)
	}
	r = cl.run("context", "delete", "prod", "--force", "-o", "json")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, `"clearedCurrentContext": true`) {
		t.Fatalf("json: %s", r.stdout)
	}
	got = readConfig(t, path)
	if strings.Contains(got, "prod") || strings.Contains(got, "currentContext") || !strings.Contains(got, "# protctl contexts, kept by hand") {
		t.Fatalf("after delete --force:\n%s", got)
	}
	cl.run("context", "current").wantCode(t, clierr.ExitNotFound)
}

// A context made with add, then changed with set, is what --context
// resolves: commands reach its Redis, and its guard rails hold.
func TestContextAddedIsUsable(t *testing.T) {
	srv := testenv.StartRedis(t)
	s := testenv.ProteanStandard(t, srv.Client(t))
	cl := newCLI(t)
	cl.run("context", "add", "fixture", "--redis", srv.URL()).wantCode(t, 0)
	r := cl.run("--context", "fixture", "partitions", "ls", s.Orders, "-o", "json")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, s.Healthy) {
		t.Fatalf("partitions ls through the added context:\n%s\n%s", r.stdout, r.stderr)
	}
	cl.run("context", "set", "fixture", "readOnly=true").wantCode(t, 0)
	r = cl.run("--context", "fixture", "config", "view", "-o", "json")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, `"readOnly": true`) || !strings.Contains(r.stdout, `"context": "fixture"`) {
		t.Fatalf("config view:\n%s", r.stdout)
	}
	r = cl.run("--context", "fixture", "streams", "trim", s.Orders+":"+s.Healthy, "--maxlen", "1", "--yes")
	r.wantCode(t, clierr.ExitRefused)
}
