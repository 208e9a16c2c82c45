package nodeconfig_test

import (
	"errors"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/nodeconfig"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// minimal is the smallest valid config; tests append to or edit it.
const minimal = `service: shop
node: n1
redis:
  url: redis://127.0.0.1:6379/0
subscriptions:
  - name: projector
    redis: {categories: [shop::order]}
    handler:
      log: {}
`

func parse(t *testing.T, yaml string, getenv map[string]string) (*nodeconfig.Config, error) {
	t.Helper()
	return nodeconfig.Parse([]byte(yaml), "node.yaml", t.TempDir(), env(getenv))
}

func mustParse(t *testing.T, yaml string, getenv map[string]string) *nodeconfig.Config {
	t.Helper()
	c, err := parse(t, yaml, getenv)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return c
}

func TestNodeConfigExampleLoads(t *testing.T) {
	c, err := nodeconfig.Load(filepath.Join("..", "..", "testdata", "node.yaml"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Service != "shop" || c.Node != "node-1" || len(c.Subscriptions) != 3 {
		t.Fatalf("unexpected config: %+v", c)
	}
	e := c.Subscriptions[0].Handler.Exec
	if e == nil || e.Command[0] != "./project-order.sh" || e.Timeout.D() != 30*time.Second {
		t.Fatalf("exec handler: %+v", e)
	}
	wantDir, _ := filepath.Abs(filepath.Join("..", "..", "testdata"))
	if e.Dir != wantDir {
		t.Errorf("exec dir %q, want the config's directory %q", e.Dir, wantDir)
	}
	if h := c.Subscriptions[1].Handler.HTTP; h == nil || h.Timeout.D() != 5*time.Second {
		t.Fatalf("http handler: %+v", h)
	}
	if c.Subscriptions[2].Handler.Log == nil {
		t.Fatal("log handler not decoded from log: {}")
	}
}

func TestNodeConfigDefaults(t *testing.T) {
	c := mustParse(t, minimal, nil)
	if c.Lease.TTL.D() != 15*time.Second || c.Lease.RenewEvery.D() != 3*time.Second {
		t.Errorf("lease defaults %s/%s", c.Lease.TTL, c.Lease.RenewEvery)
	}
	if c.Admin.Listen != "127.0.0.1:7070" || c.Admin.Token != "" {
		t.Errorf("admin defaults %+v", c.Admin)
	}
	if c.Drain.Timeout.D() != 30*time.Second {
		t.Errorf("drain default %s", c.Drain.Timeout)
	}
	if c.Redis.Layout != "protean" || c.Subscriptions[0].Redis.BackfillSuffix != "backfill" {
		t.Errorf("redis defaults %+v %+v", c.Redis, c.Subscriptions[0].Redis)
	}
	if want := 4 * goruntime.NumCPU(); c.Handlers.ExecConcurrency != want {
		t.Errorf("handlers.execConcurrency default %d, want %d (4 per CPU)", c.Handlers.ExecConcurrency, want)
	}
	if c := mustParse(t, minimal+"handlers: {execConcurrency: 3}\n", nil); c.Handlers.ExecConcurrency != 3 {
		t.Errorf("handlers.execConcurrency %d, want the 3 set", c.Handlers.ExecConcurrency)
	}
	noNode := mustParse(t, strings.Replace(minimal, "node: n1\n", "", 1), nil)
	if host, _ := os.Hostname(); !strings.HasPrefix(noNode.Node, host+"-") {
		t.Errorf("default node id %q, want hostname-pid", noNode.Node)
	}
	withExec := mustParse(t, strings.Replace(minimal, "log: {}", "exec: {command: [sh, -c, 'true']}", 1), nil)
	if withExec.Subscriptions[0].Handler.Exec.Timeout.D() != 30*time.Second {
		t.Errorf("exec timeout default %s", withExec.Subscriptions[0].Handler.Exec.Timeout)
	}
	withProcess := mustParse(t, strings.Replace(minimal, "log: {}", "process: {command: [sh, -c, 'cat']}", 1), nil)
	if pr := withProcess.Subscriptions[0].Handler.Process; pr.Timeout.D() != 30*time.Second || pr.MaxInFlight != 64 || pr.StopTimeout.D() != 10*time.Second || pr.Dir == "" {
		t.Errorf("process defaults %+v", pr)
	}
	if l := mustParse(t, minimal, nil).Lease; l.WaitReplicas != 0 || l.WaitTimeout != 0 {
		t.Errorf("lease wait defaults %+v, want none", l)
	}
	withWait := mustParse(t, strings.Replace(minimal, "node: n1\n", "node: n1\nlease: {waitReplicas: 1}\n", 1), nil)
	if l := withWait.Lease; l.WaitReplicas != 1 || l.WaitTimeout.D() != time.Second {
		t.Errorf("lease wait with waitReplicas alone %+v, want a 1s timeout", l)
	}
	shortRenew := mustParse(t, strings.Replace(minimal, "node: n1\n", "node: n1\nlease: {ttl: 2s, waitReplicas: 2}\n", 1), nil)
	if l := shortRenew.Lease; l.WaitTimeout.D() != 200*time.Millisecond {
		t.Errorf("lease wait timeout with renewEvery 400ms = %s, want renewEvery/2", l.WaitTimeout)
	}
	withHTTP := mustParse(t, strings.Replace(minimal, "log: {}", "http: {url: 'http://x:1/e'}", 1), nil)
	if withHTTP.Subscriptions[0].Handler.HTTP.Timeout.D() != 10*time.Second {
		t.Errorf("http timeout default %s", withHTTP.Subscriptions[0].Handler.HTTP.Timeout)
	}
}

// Every rejected config names the field's path (and line) in its message.
func TestNodeConfigRejects(t *testing.T) {
	cases := []struct {
		name  string
		yaml  string
		field string // the path the problem must carry
		msg   string // a fragment of the message
		line  int    // 0: not checked
	}{
		{"unknown top-level field", minimal + "servce: x\n", "servce", "unknown field", 10},
		{"unknown nested field with a suggestion", strings.Replace(minimal, "url:", "ur1:", 1), "redis.ur1", "did you mean url?", 4},
		{"unknown handler field", strings.Replace(minimal, "log: {}", "log: {colour: true}", 1), "subscriptions[0].handler.log.colour", "unknown field", 9},
		{"missing handler", strings.Replace(minimal, "    handler:\n      log: {}\n", "", 1), "subscriptions[0].handler", "exactly one of exec, http, log, process is required", 0},
		{"two handlers", strings.Replace(minimal, "log: {}", "log: {}\n      http: {url: 'http://x/'}", 1), "subscriptions[0].handler", "exactly one of exec, http, log, process is required", 8},
		{"bad http url", strings.Replace(minimal, "log: {}", "http: {url: 'ftp://x/y'}", 1), "subscriptions[0].handler.http.url", "http:// or https://", 9},
		{"http url without host", strings.Replace(minimal, "log: {}", "http: {url: 'http:///y'}", 1), "subscriptions[0].handler.http.url", "with a host", 9},
		{"bad redis url", strings.Replace(minimal, "redis://127.0.0.1:6379/0", "http://127.0.0.1:6379", 1), "redis.url", "invalid Redis URL", 4},
		{"missing redis url", strings.Replace(minimal, "  url: redis://127.0.0.1:6379/0\n", "", 1), "redis.url", "is required", 0},
		{"bad layout", strings.Replace(minimal, "redis:\n", "redis:\n  layout: ring\n", 1), "redis.layout", "protean or cluster", 4},
		{"no source", strings.Replace(minimal, "    redis: {categories: [shop::order]}\n", "", 1), "subscriptions[0]", "exactly one of redis, kafka", 6},
		{"no categories", strings.Replace(minimal, "[shop::order]", "[]", 1), "subscriptions[0].redis.categories", "at least one", 7},
		{"missing service", strings.Replace(minimal, "service: shop\n", "", 1), "service", "is required", 0},
		{"service with a brace", strings.Replace(minimal, "service: shop", "service: 'sh{op'", 1), "service", "key names", 1},
		{"duration without unit", strings.Replace(minimal, "node: n1\n", "node: n1\nlease: {ttl: 15}\n", 1), "lease.ttl", "duration", 3},
		{"negative duration", strings.Replace(minimal, "node: n1\n", "node: n1\nlease: {ttl: -1s}\n", 1), "lease.ttl", "negative", 3},
		{"renew too slow", strings.Replace(minimal, "node: n1\n", "node: n1\nlease: {ttl: 2s, renewEvery: 1s}\n", 1), "lease.renewEvery", "less than half", 3},
		{"negative wait replicas", strings.Replace(minimal, "node: n1\n", "node: n1\nlease: {waitReplicas: -1}\n", 1), "lease.waitReplicas", "must not be negative", 3},
		{"wait timeout without replicas", strings.Replace(minimal, "node: n1\n", "node: n1\nlease: {waitTimeout: 1s}\n", 1), "lease.waitTimeout", "needs lease.waitReplicas", 3},
		{"wait timeout past the renewal period", strings.Replace(minimal, "node: n1\n", "node: n1\nlease: {ttl: 5s, renewEvery: 1s, waitReplicas: 1, waitTimeout: 1s}\n", 1), "lease.waitTimeout", "less than lease.renewEvery", 3},
		{"int as string", strings.Replace(minimal, "    handler:", "    maxPartitions: '3'\n    handler:", 1), "subscriptions[0].maxPartitions", "want an integer", 8},
		{"negative workers", strings.Replace(minimal, "    handler:", "    workers: -1\n    handler:", 1), "subscriptions[0].workers", "negative", 8},
		{"negative exec concurrency", minimal + "handlers: {execConcurrency: -2}\n", "handlers.execConcurrency", "must not be negative", 10},
		{"empty process command", strings.Replace(minimal, "log: {}", "process: {command: []}", 1), "subscriptions[0].handler.process.command", "is required", 9},
		{"process command not in PATH", strings.Replace(minimal, "log: {}", "process: {command: [no-such-program-xyz]}", 1), "subscriptions[0].handler.process.command", "not found in PATH", 9},
		{"negative process in-flight", strings.Replace(minimal, "log: {}", "process: {command: [sh], maxInFlight: -1}", 1), "subscriptions[0].handler.process.maxInFlight", "negative", 9},
		{"list for a string", strings.Replace(minimal, "service: shop", "service: [a, b]", 1), "service", "want a string", 1},
		{"duplicate key", minimal + "service: other\n", "service", "set twice", 10},
		{"duplicate subscription name", minimal + "  - name: projector\n    redis: {categories: [c]}\n    handler: {log: {}}\n", "subscriptions[1].name", "also the name of subscriptions[0]", 10},
		{"exec command missing", strings.Replace(minimal, "log: {}", "exec: {command: [./missing.sh]}", 1), "subscriptions[0].handler.exec.command", "no such file", 9},
		{"exec command not in PATH", strings.Replace(minimal, "log: {}", "exec: {command: [no-such-program-xyz]}", 1), "subscriptions[0].handler.exec.command", "not found in PATH", 9},
		{"empty exec command", strings.Replace(minimal, "log: {}", "exec: {command: []}", 1), "subscriptions[0].handler.exec.command", "is required", 9},
		{"kafka without brokers section", strings.Replace(minimal, "redis: {categories: [shop::order]}", "kafka: {topic: orders}", 1), "subscriptions[0].kafka", "top-level kafka", 7},
		{"kafka negative fetch size", minimal + "kafka: {brokers: ['k:9092'], fetchMaxPartitionBytes: -1}\n", "kafka.fetchMaxPartitionBytes", "want 1 to 2147483647 bytes", 10},
		{"kafka fetch size past int32", minimal + "kafka: {brokers: ['k:9092'], fetchMaxPartitionBytes: 4294967296}\n", "kafka.fetchMaxPartitionBytes", "got 4294967296", 10},
		{"kafka bad broker", minimal + "kafka: {brokers: [localhost]}\n", "kafka.brokers[0]", "host:port", 10},
		{"kafka bad start", strings.Replace(minimal, "redis: {categories: [shop::order]}", "kafka: {topic: orders, startFrom: latest}", 1) + "kafka: {brokers: ['k:9092']}\n", "subscriptions[0].kafka.startFrom", "earliest or head", 7},
		{"kafka sasl without password", minimal + "kafka:\n  brokers: ['k:9092']\n  sasl: {mechanism: plain, username: u}\n", "kafka.sasl.passwordFile", "PROTCTL_KAFKA_PASSWORD", 12},
		{"kafka sasl bad mechanism", minimal + "kafka:\n  brokers: ['k:9092']\n  sasl: {mechanism: GSSAPI, username: u, passwordFile: /dev/null}\n", "kafka.sasl.mechanism", "SCRAM-SHA-512", 12},
		{"admin elsewhere without token", minimal + "admin: {listen: '0.0.0.0:7070'}\n", "admin.tokenFile", "token is required", 10},
		{"admin all interfaces without token", minimal + "admin: {listen: ':7070'}\n", "admin.tokenFile", "not a loopback", 10},
		{"admin bad listen", minimal + "admin: {listen: 'localhost'}\n", "admin.listen", "host:port", 10},
		{"unreadable password file", strings.Replace(minimal, "redis:\n", "redis:\n  passwordFile: /nonexistent/pw\n", 1), "redis.passwordFile", "cannot read", 4},
		{"password file is a device", strings.Replace(minimal, "redis:\n", "redis:\n  passwordFile: /dev/zero\n", 1), "redis.passwordFile", "not a regular file", 4},
		{"tls cert without key", strings.Replace(minimal, "redis:\n", "redis:\n  tls: {cert: c.pem}\n", 1), "redis.tls", "set both or neither", 4},
		{"tls ca missing", strings.Replace(minimal, "redis:\n", "redis:\n  tls: {ca: /nonexistent/ca.pem}\n", 1), "redis.tls.ca", "no such file", 4},
		{"two kafka subscriptions of one topic disagree", strings.Replace(minimal, "redis: {categories: [shop::order]}", "kafka: {topic: orders}", 1) +
			"  - name: b\n    kafka: {topic: orders}\n    maxPartitions: 2\n    handler: {log: {}}\n" + "kafka: {brokers: ['k:9092']}\n", "subscriptions[1].maxPartitions", "must equal subscriptions[0].maxPartitions", 12},
		{"empty file", "", "", "empty", 0},
		{"not yaml", "service: [\n", "", "invalid YAML", 0},
		{"not a mapping", "- a\n- b\n", "", "want a mapping", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(t, tc.yaml, nil)
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.yaml)
			}
			var ce *nodeconfig.Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %T %v, want *nodeconfig.Error", err, err)
			}
			found := false
			for _, p := range ce.Problems {
				if p.Field == tc.field && strings.Contains(p.Msg, tc.msg) && (tc.line == 0 || p.Line == tc.line) {
					found = true
				}
			}
			if !found {
				t.Fatalf("no problem at %q (line %d) containing %q in:\n%v", tc.field, tc.line, tc.msg, err)
			}
			if tc.field != "" && !strings.Contains(err.Error(), tc.field+": ") {
				t.Errorf("message does not name the path %q:\n%v", tc.field, err)
			}
			if !strings.HasPrefix(err.Error(), "node.yaml") {
				t.Errorf("message does not name the file: %v", err)
			}
		})
	}
}

// Every problem is reported in one go, in file order, one per line:
// decoding problems (unknown fields, wrong types, keys set twice) do not
// hide the validation problems of the rest of the file (a handler with
// nothing in it, an exec command that is not on PATH or not executable,
// a duplicate category, a bad topic), and a field that failed to decode
// gets no second, wrong, problem from validation.
func TestNodeConfigReportsEveryProblemAtOnce(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "plain.sh"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	yaml := `service: [shop]
bogus: 1
redis: {url: redis://h:1}
lease: {ttl: 15}
kafka: {brokers: ["k:9092"]}
subscriptions:
  - name: a
    redis: {categories: [c, c]}
    handler: {}
  - name: b
    redis: {categories: [c]}
    handler: {exec: {command: [no-such-program-xyz]}}
  - name: c
    redis: {categories: [c]}
    handler: {exec: {command: [./plain.sh]}}
  - name: d
    redis: {categories: [c]}
    handler: {exce: {command: [x]}}
  - name: e
    kafka: {topic: "orders/eu"}
    handler: {http: {url: "nope"}}
    maxInFlight: lots
  - name: "topic:orders"
    redis: {categories: [c]}
    handler: {log: {}}
  - name: f
    kafka: {topic: orders}
    handler: {log: {}}
`
	_, err := nodeconfig.Parse([]byte(yaml), "node.yaml", dir, env(nil))
	if err == nil {
		t.Fatal("accepted")
	}
	want := []string{
		`node.yaml:1: service: want a string, got a list`,
		`node.yaml:2: bogus: unknown field`,
		`node.yaml:4: lease.ttl: want a duration such as 15s or 200ms, got "15"`,
		`node.yaml:8: subscriptions[0].redis.categories[1]: "c" is also subscriptions[0].redis.categories[0]`,
		`node.yaml:9: subscriptions[0].handler: exactly one of exec, http, log, process is required`,
		`node.yaml:12: subscriptions[1].handler.exec.command: no-such-program-xyz: not found in PATH`,
		`node.yaml:15: subscriptions[2].handler.exec.command: ` + filepath.Join(dir, "plain.sh") + ` is not executable (chmod +x)`,
		`node.yaml:18: subscriptions[3].handler.exce: unknown field (did you mean exec?)`,
		`node.yaml:20: subscriptions[4].kafka.topic: invalid Kafka topic name "orders/eu"`,
		`node.yaml:21: subscriptions[4].handler.http.url: want an http:// or https:// URL with a host, got "nope"`,
		`node.yaml:22: subscriptions[4].maxInFlight: want an integer, got "lots"`,
		`node.yaml:23: subscriptions[5].name: "topic:orders" is the name the node gives the subscriptions of Kafka topic orders`,
	}
	got := strings.Split(err.Error(), "\n")
	var ce *nodeconfig.Error
	if !errors.As(err, &ce) || len(ce.Lines()) != len(got) {
		t.Fatalf("error %T, want a *nodeconfig.Error whose Lines are its message's lines", err)
	}
	if len(got) != len(want) {
		t.Errorf("%d problems, want %d:\n%s", len(got), len(want), err)
	}
	for i := range min(len(got), len(want)) {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d:\n got %s\nwant %s...", i, got[i], want[i])
		}
	}
	// The repeats that must not be there: the service that did not
	// decode is not "required", the misspelt handler is not also "exactly
	// one of", the subscription whose maxInFlight did not decode is not
	// "must equal" its topic's other one.
	for _, bad := range []string{"service: is required", "subscriptions[3].handler: exactly one", "must equal"} {
		if strings.Contains(err.Error(), bad) {
			t.Errorf("a repeated or wrong problem %q:\n%s", bad, err)
		}
	}
}

// A line break in a field name read from the file stays inside its
// problem's line.
func TestNodeConfigProblemLinesStayLines(t *testing.T) {
	_, err := parse(t, minimal+"\"a\\nb\": 1\n", nil)
	var ce *nodeconfig.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v, want a *nodeconfig.Error", err)
	}
	if lines := ce.Lines(); len(lines) != 1 || !strings.Contains(lines[0], `a\nb: unknown field`) {
		t.Fatalf("lines %q, want one naming the field a\\nb", lines)
	}
}

func TestNodeConfigSecrets(t *testing.T) {
	dir := t.TempDir()
	writeFile := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	writeFile("redis-pw", "from-file\n")
	writeFile("token", "tok-file\n")
	writeFile("kafka-pw", "kafka-file\n")
	yaml := strings.Replace(minimal, "redis:\n", "redis:\n  passwordFile: redis-pw\n", 1) +
		"admin: {listen: '0.0.0.0:0', tokenFile: token}\n" +
		"kafka: {brokers: ['k:9092'], sasl: {mechanism: scram-sha-256, username: u, passwordFile: kafka-pw}}\n"
	path := writeFile("node.yaml", yaml)

	c, err := nodeconfig.Load(path, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Redis.Password != "from-file" || c.Admin.Token != "tok-file" || c.Kafka.SASL.Password != "kafka-file" {
		t.Errorf("secrets from files (relative to the config): %q %q %q", c.Redis.Password, c.Admin.Token, c.Kafka.SASL.Password)
	}
	if c.Kafka.SASL.Mechanism != "SCRAM-SHA-256" {
		t.Errorf("mechanism %q", c.Kafka.SASL.Mechanism)
	}
	c, err = nodeconfig.Load(path, env(map[string]string{
		nodeconfig.EnvRedisPassword: "from-env", nodeconfig.EnvAdminToken: "tok-env", nodeconfig.EnvKafkaPassword: "kafka-env",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Redis.Password != "from-env" || c.Admin.Token != "tok-env" || c.Kafka.SASL.Password != "kafka-env" {
		t.Errorf("secrets from the environment win: %q %q %q", c.Redis.Password, c.Admin.Token, c.Kafka.SASL.Password)
	}

	// A password in the URL is used, and never shown in a message.
	bad := strings.Replace(minimal, "redis://127.0.0.1:6379/0", "redis://u:s3cret@127.0.0.1:6379/x", 1)
	_, err = parse(t, bad, nil)
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "redis.url") {
		t.Errorf("bad URL with a password: %v", err)
	}
	c = mustParse(t, strings.Replace(minimal, "redis://127.0.0.1", "redis://u:s3cret@127.0.0.1", 1), nil)
	if c.Redis.Password != "s3cret" {
		t.Errorf("URL password %q", c.Redis.Password)
	}
}

func TestNodeConfigLoopback(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "::1": true, "localhost": true, "127.1.2.3": true,
		"": false, "0.0.0.0": false, "::": false, "10.0.0.1": false, "example.com": false,
	} {
		if got := nodeconfig.IsLoopback(host); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", host, got, want)
		}
	}
	// Loopback needs no token.
	mustParse(t, minimal+"admin: {listen: 'localhost:0'}\n", nil)
}

// A redis+sentinel:// URL with its Sentinels' credentials loads; the
// URL's password is the primary's, the Sentinels' comes from its file or
// PROTCTL_REDIS_SENTINEL_PASSWORD.
func TestNodeConfigSentinel(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "sentinel.pw")
	if err := os.WriteFile(pw, []byte("s-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	yaml := strings.Replace(minimal, "url: redis://127.0.0.1:6379/0",
		"url: redis+sentinel://app:p-secret@s1:26379,s2/mymaster/1\n  sentinel: {username: sops, passwordFile: "+pw+"}", 1)
	c := mustParse(t, yaml, nil)
	if r := c.Redis; r.Password != "p-secret" || r.Sentinel.Username != "sops" || r.Sentinel.Password != "s-secret" {
		t.Fatalf("redis %+v", r)
	}
	c = mustParse(t, yaml, map[string]string{"PROTCTL_REDIS_SENTINEL_PASSWORD": "from-env"})
	if c.Redis.Sentinel.Password != "from-env" {
		t.Fatalf("the environment should win: %+v", c.Redis.Sentinel)
	}
}

// Bad Sentinel settings are reported at once, each naming its field.
func TestNodeConfigSentinelRejects(t *testing.T) {
	for _, tc := range []struct {
		name, redis string
		want        map[string]string // field -> part of the message
	}{
		{"no master name", "url: redis+sentinel://s1:26379",
			map[string]string{"redis.url": "no master name"}},
		{"empty address", "url: redis+sentinel://s1,,s2/m",
			map[string]string{"redis.url": "address 2 of 3 is empty"}},
		{"cluster and sentinel", "url: redis+sentinel://s1/m\n  layout: cluster",
			map[string]string{"redis.layout": "Redis Cluster fails over by itself"}},
		{"replica reads", "url: redis+sentinel://s1/m?replica_only=true",
			map[string]string{"redis.url": "replicas"}},
		{"sentinel section without a sentinel URL", "url: redis://h:6379/0\n  sentinel: {passwordFile: /nonexistent/pw}",
			map[string]string{"redis.sentinel": "need a redis+sentinel:// redis.url"}},
		{"all at once", "url: redis+sentinel://s1,,s2\n  layout: cluster\n  sentinel: {passwordFile: /nonexistent/pw}",
			map[string]string{"redis.url": "address 2 of 3 is empty", "redis.layout": "cluster", "redis.sentinel.passwordFile": "cannot read"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yaml := strings.Replace(minimal, "url: redis://127.0.0.1:6379/0", tc.redis, 1)
			_, err := parse(t, yaml, nil)
			var e *nodeconfig.Error
			if !errors.As(err, &e) {
				t.Fatalf("err %v, want a *nodeconfig.Error", err)
			}
			for field, msg := range tc.want {
				found := false
				for _, p := range e.Problems {
					if p.Field == field && strings.Contains(p.Msg, msg) {
						found = true
					}
				}
				if !found {
					t.Errorf("no problem of %s saying %q in:\n%v", field, msg, err)
				}
			}
		})
	}
}
