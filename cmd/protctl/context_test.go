package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
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
