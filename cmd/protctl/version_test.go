package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"

	"github.com/protctl/protctl/internal/buildinfo"
	"github.com/protctl/protctl/internal/output"
)

func setBuildinfo(t *testing.T, v, c, d string) {
	t.Helper()
	ov, oc, od := buildinfo.Version, buildinfo.Commit, buildinfo.Date
	buildinfo.Version, buildinfo.Commit, buildinfo.Date = v, c, d
	t.Cleanup(func() { buildinfo.Version, buildinfo.Commit, buildinfo.Date = ov, oc, od })
}

type versionDoc struct {
	APIVersion string  `json:"apiVersion" yaml:"apiVersion"`
	Kind       string  `json:"kind" yaml:"kind"`
	Version    string  `json:"version" yaml:"version"`
	Commit     *string `json:"commit" yaml:"commit"`
	Date       *string `json:"date" yaml:"date"`
	GoVersion  string  `json:"goVersion" yaml:"goVersion"`
	Platform   string  `json:"platform" yaml:"platform"`
}

func TestVersionJSON(t *testing.T) {
	setBuildinfo(t, "v1.2.3", "0123abcd", "2026-03-01T12:00:00Z")
	r := newCLI(t).run("version", "-o", "json")
	r.wantCode(t, 0)
	var doc versionDoc
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	want := versionDoc{"protctl.dev/v1", "Version", "v1.2.3", ptr("0123abcd"), ptr("2026-03-01T12:00:00Z"), runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH}
	if diff := cmp.Diff(want, doc); diff != "" {
		t.Fatalf("version -o json (-want +got):\n%s", diff)
	}
	var raw map[string]any
	_ = json.Unmarshal([]byte(r.stdout), &raw)
	if len(raw) != 7 {
		t.Fatalf("fields: %v", raw)
	}
}

func TestVersionYAMLAndTable(t *testing.T) {
	setBuildinfo(t, "v1.2.3", "", "")
	r := newCLI(t).run("version", "-o", "yaml")
	r.wantCode(t, 0)
	var doc versionDoc
	if err := yaml.Unmarshal([]byte(r.stdout), &doc); err != nil || doc.Kind != "Version" || doc.Version != "v1.2.3" {
		t.Fatalf("yaml: %v %+v\n%s", err, doc, r.stdout)
	}
	if !strings.Contains(r.stdout, "commit: null") {
		t.Fatalf("an unknown commit is null:\n%s", r.stdout)
	}

	r = newCLI(t).run("version")
	r.wantCode(t, 0)
	for _, want := range []string{"Version:     v1.2.3", "Commit:      unknown", "Go version:  " + runtime.Version()} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("table lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestColourFollowsTTYNoColorAndFlag(t *testing.T) {
	cases := []struct {
		name    string
		tty     bool
		noColor bool
		args    []string
		want    bool
	}{
		{"terminal", true, false, nil, true},
		{"terminal with NO_COLOR", true, true, nil, false},
		{"pipe", false, false, nil, false},
		{"terminal with --color never", true, false, []string{"--color", "never"}, false},
		{"pipe with --color always", false, false, []string{"--color", "always"}, true},
		{"json on a terminal", true, false, []string{"-o", "json"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := newCLI(t)
			cl.tty = c.tty
			cl.configure = func(ios *output.IOStreams) { ios.SetNoColorEnv(c.noColor) }
			r := cl.run(append([]string{"version"}, c.args...)...)
			r.wantCode(t, 0)
			if hasANSI(r.stdout) != c.want {
				t.Fatalf("ANSI escapes = %v, want %v:\n%q", hasANSI(r.stdout), c.want, r.stdout)
			}
		})
	}
}

// TestVersionFromLdflags builds the binary the way a release does (the
// env, flags and ldflags of .goreleaser.yaml, its templates filled with
// test values) and checks that the linker's values reach version -o json.
func TestVersionFromLdflags(t *testing.T) {
	bin := releaseBinary(t)
	cmd := exec.Command(bin, "version", "-o", "json")
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("protctl version: %v", err)
	}
	var doc versionDoc
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	want := versionDoc{"protctl.dev/v1", "Version", "v" + testReleaseVars["Version"],
		ptr(testReleaseVars["FullCommit"]), ptr(testReleaseVars["CommitDate"]), runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH}
	if diff := cmp.Diff(want, doc); diff != "" {
		t.Fatalf("version -o json, want the ldflags values (-want +got):\n%s", diff)
	}

	// The binary's exit codes are the contract's too.
	bad := exec.Command(bin, "version", "--bogus")
	if err := bad.Run(); err == nil || bad.ProcessState.ExitCode() != 2 {
		t.Fatalf("usage error exit %v", err)
	}
}

func ptr(s string) *string { return &s }
