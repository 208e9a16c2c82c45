package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/protctl/protctl/internal/handlers"
)

// A failing command's stderr (its last StderrLogLimit bytes) is logged at
// warn, the default level's reach, with the message's identity; a
// success logs nothing at info.
func TestNodeHandlerExecLogsStderrOfFailuresAtWarn(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// 10,000 bytes of noise on stderr, then the line that explains.
	sh := script(t, `cat >/dev/null
i=0
while [ $i -lt 100 ]; do printf '%099d\n' $i >&2; i=$((i+1)); done
echo "db said: duplicate key" >&2
echo "stdout is not stderr"
exit 3
`)
	h := newExec(t, handlers.ExecConfig{Command: []string{sh}, Logger: log})
	if err := h.Handle(context.Background(), msg); err == nil {
		t.Fatal("no error")
	}
	ok := newExec(t, handlers.ExecConfig{Command: []string{script(t, "echo fine >&2")}, Logger: log})
	if err := ok.Handle(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one line (the failure's), got %d:\n%s", len(lines), buf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"level": "WARN", "subscription": "projector", "partition": "k1", "position": "1700000000000-3",
		"attempt": float64(2), "event": "e1", "class": "aggregate",
	} {
		if rec[k] != want {
			t.Errorf("%s = %#v, want %#v\n%s", k, rec[k], want, lines[0])
		}
	}
	stderr, _ := rec["stderr"].(string)
	if !strings.HasSuffix(strings.TrimSpace(stderr), "db said: duplicate key") {
		t.Errorf("stderr does not end with the command's last line: ...%q", stderr[max(0, len(stderr)-80):])
	}
	if n := len(stderr); n > handlers.StderrLogLimit+len("…") || n < handlers.StderrLogLimit {
		t.Errorf("stderr is %d bytes, want the last %d", n, handlers.StderrLogLimit)
	}
	if strings.Contains(stderr, "stdout is not stderr") {
		t.Error("stdout logged as stderr")
	}
}
