//go:build unix

package main

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/nodeconfig"
	"github.com/protctl/protctl/internal/testenv"
)

// runProtctl runs the binary with args and returns its exit code and
// stderr.
func runProtctl(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stderr procOutput
	cmd.Stderr = &stderr
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=/usr/bin:/bin"}
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("protctl %s did not exit within 60s:\n%s", strings.Join(args, " "), stderr.String())
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// `run node` errors as an operator reads them, through the binary: every
// problem of a config on its own line with the config exit code (2), and
// a taken admin port named as the admin.listen setting with the ways
// out, also exit 2. Neither needs Redis: both are found before it is
// dialled.
func TestRunNodeStartupErrorsThroughTheBinary(t *testing.T) {
	bin := buildProtctl(t)

	t.Run("every config problem on its own line", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "plain.sh"), "#!/bin/sh\n") // 0600: not executable
		path := filepath.Join(dir, "node.yaml")
		writeFile(t, path, `service: shop
nodes: 3
redis: {url: "redis://127.0.0.1:1/0"}
admin: {listen: "127.0.0.1:0"}
subscriptions:
  - name: a
    redis: {categories: [c]}
    handler: {}
  - name: b
    redis: {categories: [c]}
    handler: {exec: {command: [no-such-program-xyz]}}
  - name: c
    redis: {categories: [c]}
    handler: {exec: {command: [./plain.sh]}}
  - name: d
    redis: {categories: [c]}
    handler: {http: {url: "127.0.0.1/events"}}
`)
		code, stderr := runProtctl(t, bin, "run", "node", "--config", path)
		if code != clierr.Usage.ExitCode() {
			t.Fatalf("exit %d, want %d (config):\n%s", code, clierr.Usage.ExitCode(), stderr)
		}
		want := []string{
			"protctl: " + path + ":2: nodes: unknown field",
			"protctl: " + path + ":8: subscriptions[0].handler: exactly one of exec, http, log, process is required",
			"protctl: " + path + ":11: subscriptions[1].handler.exec.command: no-such-program-xyz: not found in PATH",
			"protctl: " + path + ":14: subscriptions[2].handler.exec.command: " + filepath.Join(dir, "plain.sh") + " is not executable (chmod +x)",
			"protctl: " + path + `:17: subscriptions[3].handler.http.url: want an http:// or https:// URL with a host, got "127.0.0.1/events"`,
		}
		got := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		if len(got) != len(want) {
			t.Errorf("%d lines, want %d:\n%s", len(got), len(want), stderr)
		}
		for i := range min(len(got), len(want)) {
			if !strings.HasPrefix(got[i], want[i]) {
				t.Errorf("line %d:\n got %s\nwant %s...", i+1, got[i], want[i])
			}
		}
		if strings.Contains(stderr, `\n`) {
			t.Errorf("problems joined by a literal \\n:\n%s", stderr)
		}
	})

	t.Run("taken admin port", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		taken := ln.Addr().String()
		port, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "node.yaml")
		writeFile(t, path, fmt.Sprintf(`service: shop
redis: {url: "redis://127.0.0.1:%d/0"}
admin: {listen: "%s"}
subscriptions:
  - name: p
    redis: {categories: [c]}
    handler: {log: {}}
`, port, taken))
		code, stderr := runProtctl(t, bin, "run", "node", "--config", path)
		if code != clierr.Usage.ExitCode() {
			t.Fatalf("exit %d, want %d (config):\n%s", code, clierr.Usage.ExitCode(), stderr)
		}
		_, p, _ := net.SplitHostPort(taken)
		n, _ := strconv.Atoi(p)
		for _, want := range []string{
			"protctl: admin.listen " + taken + ": the address is already in use",
			fmt.Sprintf(`"127.0.0.1:%d"`, n+1), `"127.0.0.1:0"`, "admin.disabled: true",
		} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr)
			}
		}
		if strings.Contains(stderr, "admin: listen on") {
			t.Errorf("stderr has the internal prefix:\n%s", stderr)
		}
	})
}

// When the default admin address is the one taken (the second node on a
// host with no admin section), the message says that admin.listen was
// not set and is the setting to add. The error is a real EADDRINUSE from
// a port this test holds, since 7070 itself may or may not be free here.
func TestAdminListenErrorDefaultAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, inUse := net.Listen("tcp", ln.Addr().String())
	if !errors.Is(inUse, syscall.EADDRINUSE) {
		t.Fatalf("listening twice: %v, want EADDRINUSE", inUse)
	}
	err = adminListenError(nodeconfig.DefaultAdminListen, fmt.Errorf("admin: listen on %s: %w", nodeconfig.DefaultAdminListen, inUse))
	want := `admin.listen (default 127.0.0.1:7070): the address is already in use (another node on this host?): give each node its own admin.listen, e.g. "127.0.0.1:7071", or "127.0.0.1:0" for a free port`
	if !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got  %s\nwant %s...", err, want)
	}
	if _, k := clierr.Classify(err); k != clierr.Usage {
		t.Errorf("kind %s, want %s", k, clierr.Usage)
	}
}

// The node's joined errors (every subscription failed, a drain that
// failed) are printed one per line under their heading, with the exit
// code of the kind they carry; a line break inside one stays escaped, and
// an error that is not a multi-line one keeps its line breaks escaped.
func TestRunNodeJoinedErrorsOnePerLine(t *testing.T) {
	joined := errors.Join(
		fmt.Errorf(`subscription "a": %w`, errors.New("handler exited 3")),
		fmt.Errorf(`subscription "b": %w`, errors.New("line one\nline two")),
	)
	cases := []struct {
		name string
		err  error
		code int
		want string
	}{
		{"every subscription failed", newLineErrors("every subscription failed:", joined), 1,
			"protctl: every subscription failed:\nprotctl: subscription \"a\": handler exited 3\nprotctl: subscription \"b\": line one\\nline two\n"},
		{"drain overran", clierr.Interrupted.Wrap(newLineErrors("drain did not finish within 1s (drain.timeout):", joined)), 130,
			"protctl: drain did not finish within 1s (drain.timeout):\nprotctl: subscription \"a\": handler exited 3\nprotctl: subscription \"b\": line one\\nline two\n"},
		{"one error", newLineErrors("drain finished with errors:", errors.New("leave membership: refused")), 1,
			"protctl: drain finished with errors:\nprotctl: leave membership: refused\n"},
		{"not multi-line", errors.New("x\ny"), 1, "protctl: x\\ny\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := newCLI(t)
			cl.extra = with(errCmd(c.err))
			r := cl.run("fail")
			r.wantCode(t, c.code)
			if r.stderr != c.want {
				t.Fatalf("stderr:\n%s\nwant:\n%s", r.stderr, c.want)
			}
		})
	}
}
