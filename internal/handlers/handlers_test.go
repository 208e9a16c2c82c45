package handlers_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/handlers"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/source"
)

var msg = runtime.Message{
	Subscription: "projector",
	Source:       source.Redis,
	Category:     "shop::order",
	Key:          "k1",
	Stream:       "shop::order:k1",
	Aggregate:    "k1",
	Position:     "1700000000000-3",
	Data:         []byte(`{"data":{"seq":7},"metadata":{"headers":{"id":"e1"}}}`),
	Generation:   42,
	Attempt:      2,
}

func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "h.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func newExec(t *testing.T, cfg handlers.ExecConfig) *handlers.Exec {
	t.Helper()
	h, err := handlers.NewExec(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestNodeHandlerExecPassesEnvelopeAndMetadata(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	sh := script(t, `cat > "$OUT.stdin"
env | grep -E '^(PROTCTL_|EXTRA=)' | sort > "$OUT"
`)
	t.Setenv("PROTCTL_REDIS_PASSWORD", "secret") // must not be inherited
	h := newExec(t, handlers.ExecConfig{Command: []string{sh}, Env: map[string]string{"OUT": out, "EXTRA": "x"}})
	if err := h.Handle(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	stdin, _ := os.ReadFile(out + ".stdin")
	if !bytes.Equal(stdin, msg.Data) {
		t.Errorf("stdin %q, want the envelope", stdin)
	}
	env, _ := os.ReadFile(out)
	for _, want := range []string{
		"PROTCTL_SUBSCRIPTION=projector", "PROTCTL_PARTITION=k1", "PROTCTL_POSITION=1700000000000-3",
		"PROTCTL_GENERATION=42", "PROTCTL_ATTEMPT=2", "PROTCTL_SOURCE=redis", "PROTCTL_CATEGORY=shop::order", "EXTRA=x",
	} {
		if !strings.Contains(string(env), want+"\n") {
			t.Errorf("env lacks %s:\n%s", want, env)
		}
	}
	if strings.Contains(string(env), "secret") {
		t.Errorf("the node's Redis password leaked into the handler's environment:\n%s", env)
	}

	// Kafka: the partition is the partition number.
	km := runtime.Message{Subscription: "s", Source: source.Kafka, Topic: "orders", Partition: 5, Key: "a1", Aggregate: "a1", Position: "99", Data: []byte("{}"), Generation: 1, Attempt: 1}
	if err := h.Handle(context.Background(), km); err != nil {
		t.Fatal(err)
	}
	env, _ = os.ReadFile(out)
	for _, want := range []string{"PROTCTL_PARTITION=5", "PROTCTL_POSITION=99", "PROTCTL_TOPIC=orders", "PROTCTL_AGGREGATE=a1"} {
		if !strings.Contains(string(env), want+"\n") {
			t.Errorf("kafka env lacks %s:\n%s", want, env)
		}
	}
}

func TestNodeHandlerExecExitCodes(t *testing.T) {
	cases := []struct {
		name  string
		body  string
		ok    bool
		class runtime.FailureClass
		msg   string
	}{
		{"exit 0 is success", "exit 0", true, 0, ""},
		{"exit 75 is systemic", "echo db down >&2; exit 75", false, runtime.FailSystemic, "db down"},
		{"exit 1 is an aggregate failure", "echo bad event >&2; exit 1", false, runtime.FailAggregate, "bad event"},
		{"exit 3 is an aggregate failure", "exit 3", false, runtime.FailAggregate, "exit status 3"},
		{"killed by a signal is an aggregate failure", "kill -9 $$", false, runtime.FailAggregate, "killed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newExec(t, handlers.ExecConfig{Command: []string{script(t, tc.body)}})
			err := h.Handle(context.Background(), msg)
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			if c := runtime.Classify(err); c != tc.class {
				t.Errorf("class %s, want %s (%v)", c, tc.class, err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q lacks %q", err, tc.msg)
			}
		})
	}
}

func TestNodeHandlerExecCommandMissingIsSystemic(t *testing.T) {
	h := newExec(t, handlers.ExecConfig{Command: []string{filepath.Join(t.TempDir(), "missing.sh")}})
	err := h.Handle(context.Background(), msg)
	if runtime.Classify(err) != runtime.FailSystemic || err == nil {
		t.Fatalf("missing command: %v (%s)", err, runtime.Classify(err))
	}
}

// A timeout kills the command's whole process group: the background
// child a script started dies with it.
func TestNodeHandlerExecTimeoutKillsProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	sh := script(t, `sleep 60 &
echo $! > "`+pidFile+`"
wait
`)
	h := newExec(t, handlers.ExecConfig{Command: []string{sh}, Timeout: 300 * time.Millisecond})
	start := time.Now()
	err := h.Handle(context.Background(), msg)
	if err == nil || runtime.Classify(err) != runtime.FailAggregate || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("timeout: %v (%s)", err, runtime.Classify(err))
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the handler returned after %s", took)
	}
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	testenv.Eventually(t, 5*time.Second, fmt.Sprintf("the script's child %d to end after the timeout", pid), func() (bool, string) {
		if syscall.Kill(pid, 0) != nil {
			return true, ""
		}
		// A killed child may linger as a zombie until its parent (also
		// killed) is reaped by init; check its state.
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		return err == nil && strings.Contains(string(stat), ") Z"), fmt.Sprintf("still runs: %s", stat)
	})
}

// A cancelled context (the lease was lost, or the node stops hard) stops
// the command and is not the message's fault.
func TestNodeHandlerExecCancelled(t *testing.T) {
	h := newExec(t, handlers.ExecConfig{Command: []string{script(t, "sleep 60")}})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	err := h.Handle(ctx, msg)
	if err == nil || runtime.Classify(err) != runtime.FailSystemic {
		t.Fatalf("cancelled: %v (%s)", err, runtime.Classify(err))
	}
}

func TestNodeHandlerHTTPStatusClasses(t *testing.T) {
	var got http.Header
	var body []byte
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		body, _ = io.ReadAll(r.Body)
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		if status == http.StatusFound {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, "reply body")
	}))
	defer srv.Close()
	h, err := handlers.NewHTTP(handlers.HTTPConfig{URL: srv.URL + "/events", Headers: map[string]string{"Authorization": "Bearer x"}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		status int
		ok     bool
		class  runtime.FailureClass
	}{
		{200, true, 0}, {202, true, 0}, {204, true, 0},
		{429, false, runtime.FailSystemic}, {500, false, runtime.FailSystemic}, {503, false, runtime.FailSystemic},
		{400, false, runtime.FailAggregate}, {404, false, runtime.FailAggregate}, {422, false, runtime.FailAggregate},
		{302, false, runtime.FailAggregate},
	}
	for _, tc := range cases {
		status = tc.status
		err := h.Handle(context.Background(), msg)
		if tc.ok {
			if err != nil {
				t.Errorf("%d: %v", tc.status, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%d: no error", tc.status)
			continue
		}
		if c := runtime.Classify(err); c != tc.class {
			t.Errorf("%d: class %s, want %s (%v)", tc.status, c, tc.class, err)
		}
		if !strings.Contains(err.Error(), strconv.Itoa(tc.status)) {
			t.Errorf("%d: error %q lacks the status", tc.status, err)
		}
	}
	if !bytes.Equal(body, msg.Data) {
		t.Errorf("body %q, want the envelope", body)
	}
	for k, want := range map[string]string{
		"Content-Type": "application/json", "Authorization": "Bearer x",
		"X-Protctl-Subscription": "projector", "X-Protctl-Partition": "k1", "X-Protctl-Position": "1700000000000-3",
		"X-Protctl-Generation": "42", "X-Protctl-Attempt": "2",
	} {
		if got.Get(k) != want {
			t.Errorf("header %s = %q, want %q", k, got.Get(k), want)
		}
	}
}

func TestNodeHandlerHTTPTimeoutAndUnreachableAreSystemic(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release)
	h, _ := handlers.NewHTTP(handlers.HTTPConfig{URL: slow.URL, Timeout: 200 * time.Millisecond})
	err := h.Handle(context.Background(), msg)
	if err == nil || runtime.Classify(err) != runtime.FailSystemic || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("timeout: %v (%s)", err, runtime.Classify(err))
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	h, _ = handlers.NewHTTP(handlers.HTTPConfig{URL: "http://" + addr + "/"})
	err = h.Handle(context.Background(), msg)
	if err == nil || runtime.Classify(err) != runtime.FailSystemic {
		t.Fatalf("connection refused: %v (%s)", err, runtime.Classify(err))
	}
	if _, err := handlers.NewHTTP(handlers.HTTPConfig{URL: "ftp://x/"}); err == nil {
		t.Error("ftp URL accepted")
	}
}

func TestNodeHandlerLogPrints(t *testing.T) {
	var buf bytes.Buffer
	h := handlers.NewLog(&buf, true)
	if err := h.Handle(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	want := `projector shop::order/k1 1700000000000-3 gen=42 attempt=2 {"data":{"seq":7},"metadata":{"headers":{"id":"e1"}}}` + "\n"
	if buf.String() != want {
		t.Errorf("got %q\nwant %q", buf.String(), want)
	}
}

// Envelopes of every size reach the command's stdin byte for byte, those
// that fit a pipe (written before the command starts) and those that do
// not (copied in as the command reads).
func TestNodeHandlerExecInputOfEverySize(t *testing.T) {
	out := filepath.Join(t.TempDir(), "stdin")
	sh := script(t, `cat > "$OUT"`)
	h := newExec(t, handlers.ExecConfig{Command: []string{sh}, Env: map[string]string{"OUT": out}})
	for _, n := range []int{0, 1, 4095, 4096, 4097, 300 << 10} {
		m := msg
		m.Data = bytes.Repeat([]byte{'a', 'b', 'c'}, n/3+1)[:n]
		if err := h.Handle(context.Background(), m); err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		got, err := os.ReadFile(out)
		if err != nil || !bytes.Equal(got, m.Data) {
			t.Fatalf("%d bytes: the command read %d (%v)", n, len(got), err)
		}
	}
}
