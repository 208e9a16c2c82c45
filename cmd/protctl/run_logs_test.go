//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
)

// duplicateKeys returns the keys a JSON object line carries more than
// once (slog's JSON handler writes an attribute once per With or call
// that adds it, so a repeated key is an attribute added twice).
func duplicateKeys(line []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object: %s", line)
	}
	seen := map[string]bool{}
	var dups []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k := tok.(string)
		if seen[k] {
			dups = append(dups, k)
		}
		seen[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
	}
	return dups, nil
}

// Every line a node logs, at debug level, names each attribute once
// (issue 18 item 6: `subscription=app.Billing subscription=app.Billing`),
// and a failing exec handler's stderr reaches the log at warn with the
// event's identity.
func TestRunNodeLogLinesNameEachAttributeOnce(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	dir := t.TempDir()
	script := filepath.Join(dir, "h.sh")
	// Every event fails its first attempt, with a word on stderr.
	writeFile(t, script, "#!/bin/sh\ncat >/dev/null\nif [ \"$PROTCTL_ATTEMPT\" = 1 ]; then echo \"no stock for $PROTCTL_PARTITION\" >&2; exit 1; fi\n")
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := <-publishEvents(t, c, keyNames(2), 2, 0); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "node.yaml")
	writeFile(t, path, nodeYAML(srv.URL(), "node-1", fmt.Sprintf("      exec: {command: [\"%s\"], timeout: 30s}\n", script), 20*time.Second))
	var logs procOutput
	_, stop := startRunNodeOpts(t, &runNodeOptions{
		Out: io.Discard, ErrOut: &logs, Getenv: func(string) string { return "" },
		ConfigPath: path, LogFormat: "json", LogLevel: slog.LevelDebug,
	}, &logs)
	testenv.Eventually(t, 60*time.Second, "4 events handled after a failure each", func() (bool, string) {
		s := logs.String()
		ok, failed := strings.Count(s, `"msg":"exec handler ok"`), strings.Count(s, `"msg":"exec handler failed"`)
		return ok >= 4 && failed >= 4, fmt.Sprintf("%d ok, %d failed", ok, failed)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	warned := 0
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		dups, err := duplicateKeys([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		if len(dups) > 0 {
			t.Errorf("attributes %v repeated in: %s", dups, line)
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec["msg"] != "exec handler failed" {
			continue
		}
		warned++
		key, _ := rec["partition"].(string)
		if rec["level"] != "WARN" || rec["subscription"] != procGroup || key == "" || rec["position"] == nil ||
			rec["attempt"] != float64(1) || rec["event"] == nil || rec["stderr"] != "no stock for "+key+"\n" {
			t.Errorf("failure line without the event's identity or its stderr: %s", line)
		}
	}
	if warned < 4 {
		t.Errorf("%d failure warnings, want 4", warned)
	}
}
