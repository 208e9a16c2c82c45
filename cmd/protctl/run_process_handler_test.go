//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
)

// A process handler child in sh: the id is the request's first field
// (docs/node-config.md, "process"); it records each request's partition
// and envelope and answers ok; it exits when its stdin ends.
const shProcessChild = `#!/bin/sh
echo $$ > "$PIDFILE"
while IFS= read -r line; do
  id=${line#*\"id\":}; id=${id%%,*}
  key=${line#*\"partition\":\"}; key=${key%%\"*}
  seq=${line#*\"seq\":}; seq=${seq%%[!0-9]*}
  echo "$key $seq" >> "$RECORD"
  printf '{"id":%s,"result":"ok"}\n' "$id"
done
echo "stdin closed, bye" >&2
`

// run node with a process handler: one child serves every event of every
// partition, in per-key order, and the drain closes its stdin and waits
// for it to exit.
func TestRunNodeProcessHandler(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	dir := t.TempDir()
	child := filepath.Join(dir, "child.sh")
	writeFile(t, child, shProcessChild)
	if err := os.Chmod(child, 0o755); err != nil {
		t.Fatal(err)
	}
	record, pidFile := filepath.Join(dir, "record.txt"), filepath.Join(dir, "child.pid")
	keys := keyNames(4)
	if err := <-publishEvents(t, c, keys, 10, 0); err != nil {
		t.Fatal(err)
	}
	handler := fmt.Sprintf("      process:\n        command: [\"%s\"]\n        env: {RECORD: \"%s\", PIDFILE: \"%s\"}\n", child, record, pidFile)
	path := filepath.Join(dir, "node.yaml")
	writeFile(t, path, nodeYAML(srv.URL(), "node-1", handler, 20*time.Second))
	_, stop := startRunNode(t, path)
	testenv.Eventually(t, 60*time.Second, "40 events handled", func() (bool, string) {
		n := strings.Count(readFile(t, record), "\n")
		return n >= 40, fmt.Sprintf("%d handled", n)
	})
	got := map[string][]int{}
	for _, line := range strings.Split(strings.TrimSpace(readFile(t, record)), "\n") {
		f := strings.Fields(line)
		seq, _ := strconv.Atoi(f[1])
		got[f[0]] = append(got[f[0]], seq)
	}
	for _, k := range keys {
		if len(got[k]) != 10 {
			t.Fatalf("%s: handled %v, want 1..10", k, got[k])
		}
		for i, seq := range got[k] {
			if seq != i+1 {
				t.Fatalf("%s: handled %v, want 1..10 in order", k, got[k])
			}
		}
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(readFile(t, pidFile)))
	if err := stop(); err != nil {
		t.Fatalf("drain: %v", err)
	}
	if pid == 0 || syscall.Kill(pid, 0) == nil {
		t.Errorf("the child (pid %d) still runs after the node stopped", pid)
	}
}
