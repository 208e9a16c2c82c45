//go:build unix

package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// Two `protctl run node` processes reach their Redis through Sentinel
// (a redis+sentinel:// URL, the primary's and the Sentinels' passwords
// from the environment) and handle every event, per key in order, no key
// in two handlers at once; they stop cleanly on SIGTERM and leave no
// lease on the primary.
func TestRunNodeThroughSentinel(t *testing.T) {
	bin := buildProtctl(t)
	const primaryPW, sentinelPW = "node-primary-pw", "node-sentinel-pw"
	s := testenv.StartSentinel(t, testenv.WithSentinelPasswords(primaryPW, sentinelPW))
	fc := s.FailoverClient(t)
	store := redisstore.New(fc)
	dir := t.TempDir()
	script := writeRecordScript(t, dir)
	record := filepath.Join(dir, "record.txt")

	const nKeys, perKey = 20, 5
	keys := keyNames(nKeys)
	env := []string{"PROTCTL_REDIS_PASSWORD=" + primaryPW, "PROTCTL_REDIS_SENTINEL_PASSWORD=" + sentinelPW}
	procs := make([]*nodeProc, 2)
	for i := range procs {
		id := fmt.Sprintf("node-%d", i+1)
		cfg := filepath.Join(dir, id+".yaml")
		writeFile(t, cfg, nodeYAML(s.URL(), id, execHandlerYAML(script, record, ""), 10*time.Second))
		procs[i] = startNodeProc(t, bin, id, cfg, env...)
	}
	waitMembers(t, store, 2)
	if err := <-publishEvents(t, fc, keys, perKey, 0); err != nil {
		t.Fatalf("publish: %v", err)
	}
	testenv.Eventually(t, 2*time.Minute, "every event handled", func() (bool, string) {
		done := map[string]bool{}
		for _, e := range parseEvents(t, readFile(t, record)) {
			if e.kind == 'E' {
				done[e.key+"/"+strconv.Itoa(e.seq)] = true
			}
		}
		return len(done) == nKeys*perKey, fmt.Sprintf("%d of %d handled", len(done), nKeys*perKey)
	})
	checkHandling(t, parseEvents(t, readFile(t, record)), keys, perKey)

	for _, p := range procs {
		p.signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		if code := p.exitCode(30 * time.Second); code != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0", p.id, code)
		}
	}
	primary, err := s.Master(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if leases := heldLeases(t, primary.Client(t), ""); len(leases) != 0 {
		t.Errorf("leases held on the primary after every node stopped: %v", leases)
	}
}
