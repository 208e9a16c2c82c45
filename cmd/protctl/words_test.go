//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/testenv"
)

// TestBackingOffAndPausedReadTheSameEverywhere (issue 23: the same words
// mean the same state in every command, the dashboard's data, JSON and
// metrics). A running node whose handler fails systemically on one key
// backs off on it: /v1/status lists it under backingOff, nodes ls under
// BACKING-OFF, /metrics counts it in protctl_partitions_backing_off,
// check --no-backing-off fails on it, and nothing calls it paused. An
// operator's pause of another key is paused in /v1/status, PAUSED in
// nodes ls, partitions ls and check, and protctl_partitions_paused, and
// nothing calls it backing off.
func TestBackingOffAndPausedReadTheSameEverywhere(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	const sick, held = "o-000", "o-001"
	var down atomic.Bool
	down.Store(true)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if down.Load() && strings.Contains(string(body), sick) {
			w.WriteHeader(http.StatusServiceUnavailable) // systemic: try again later
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer hs.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "node.yaml")
	writeFile(t, path, nodeYAML(srv.URL(), "node-1", fmt.Sprintf("      http: {url: %q}\n", hs.URL+"/events"), 10*time.Second))
	base, _ := startRunNode(t, path)
	cl := newCLI(t)
	cl.env["PROTCTL_REDIS"] = srv.URL()
	publishSeqs(t, c, []string{sick, held}, 1, 2)

	type statusDoc struct {
		BackingOff    []string `json:"backingOff"`
		Paused        []string `json:"paused"`
		Subscriptions []struct {
			Name       string   `json:"name"`
			BackingOff []string `json:"backingOff"`
			Paused     []string `json:"paused"`
		} `json:"subscriptions"`
	}
	status := func() statusDoc {
		t.Helper()
		code, body := httpGet(t, base+"/v1/status")
		var st statusDoc
		if code != 200 || json.Unmarshal([]byte(body), &st) != nil || len(st.Subscriptions) != 1 {
			t.Fatalf("/v1/status %d: %s", code, body)
		}
		if strings.Contains(body, "operatorPaused") {
			t.Fatalf("/v1/status still has operatorPaused: %s", body)
		}
		return st
	}
	metrics := func(want map[string]float64) func() (bool, string) {
		return func() (bool, string) {
			_, text := httpGet(t, base+"/metrics")
			if strings.Contains(text, "protctl_partitions_operator_paused") {
				return false, "protctl_partitions_operator_paused is still exported"
			}
			for series, w := range want {
				if v, ok := metricValue(t, text, series); !ok || v != w {
					return false, fmt.Sprintf("%s = %v (present %v), want %v", series, v, ok, w)
				}
			}
			return true, ""
		}
	}
	backingOffSeries := `protctl_partitions_backing_off{subscription="` + procGroup + `"}`
	pausedSeries := `protctl_partitions_paused{subscription="` + procGroup + `"}`
	sickOne, heldOne := procGroup+"/"+sick, procGroup+"/"+held
	// rowOf is the line of a table that names key.
	rowOf := func(table, key string) string {
		for _, l := range strings.Split(table, "\n") {
			if strings.Contains(l, key) {
				return l
			}
		}
		t.Fatalf("no row for %s in:\n%s", key, table)
		return ""
	}

	// 1. The back-off.
	testenv.Eventually(t, time.Minute, "the sick key backing off in /v1/status", func() (bool, string) {
		st := status()
		return slices.Equal(st.BackingOff, []string{sickOne}) && slices.Equal(st.Subscriptions[0].BackingOff, []string{sick}),
			fmt.Sprintf("%+v", st)
	})
	if st := status(); len(st.Paused) != 0 || len(st.Subscriptions[0].Paused) != 0 {
		t.Fatalf("a back-off listed as paused: %+v", st)
	}
	testenv.Eventually(t, time.Minute, "the metrics of the back-off", metrics(map[string]float64{backingOffSeries: 1, pausedSeries: 0}))
	testenv.Eventually(t, time.Minute, "the heartbeat with the back-off", func() (bool, string) {
		r := cl.run("nodes", "ls", "--service", procService, "-o", "json")
		return r.code == 0 && strings.Contains(r.stdout, sickOne), r.stdout
	})
	var nodes struct {
		Items []struct {
			BackingOff []string `json:"backingOff"`
			Paused     []string `json:"paused"`
		} `json:"items"`
	}
	r := cl.run("nodes", "ls", "--service", procService, "-o", "json")
	r.wantCode(t, 0)
	decode(t, r.stdout, &nodes)
	if len(nodes.Items) != 1 || !slices.Equal(nodes.Items[0].BackingOff, []string{sickOne}) || len(nodes.Items[0].Paused) != 0 {
		t.Fatalf("nodes ls -o json: %s", r.stdout)
	}
	r = cl.run("nodes", "ls", "--service", procService)
	r.wantCode(t, 0)
	header := strings.Fields(rowOf(r.stdout, "NODE"))
	row := strings.Fields(rowOf(r.stdout, "node-1"))
	if i := slices.Index(header, "BACKING-OFF"); i < 0 || i >= len(row) || row[i] != sickOne || row[slices.Index(header, "PAUSED")] != "-" {
		t.Fatalf("nodes ls: want %s under BACKING-OFF and nothing PAUSED:\n%s", sickOne, r.stdout)
	}
	r = cl.run("check", "--no-backing-off", "--service", procService, "-o", "json")
	r.wantCode(t, clierr.ExitCheckFailed)
	if !strings.Contains(r.stdout, `"backingOff"`) || !strings.Contains(r.stdout, "node-1: "+sickOne) {
		t.Fatalf("check --no-backing-off: %s", r.stdout)
	}
	r = cl.run("partitions", "ls", procCategory)
	r.wantCode(t, 0)
	if strings.Contains(r.stdout, "PAUSED") {
		t.Fatalf("partitions ls calls the back-off PAUSED:\n%s", r.stdout)
	}
	cl.run("check", "--category", procCategory, "--fail-on-status", "PAUSED").wantCode(t, 0)

	// 2. The back-off ends; an operator pauses the other key.
	down.Store(false)
	testenv.Eventually(t, time.Minute, "the back-off over", func() (bool, string) {
		st := status()
		return len(st.BackingOff) == 0, fmt.Sprintf("%+v", st)
	})
	cl.run("pause", procGroup, held, "--reason", "downstream rejects it", "--yes").wantCode(t, 0)
	// News, for the key's owner to be held: `pause` does not wait for
	// the node to learn of it, and an owner that read the news first
	// finishes that batch and may leave the key idle (docs/cli.md). The
	// next news after the node knows of the pause is held.
	seq, sent := 3, time.Now()
	publishSeqs(t, c, []string{held}, seq, seq)
	testenv.Eventually(t, time.Minute, "the held key paused in /v1/status", func() (bool, string) {
		st := status()
		if slices.Equal(st.Paused, []string{heldOne}) && slices.Equal(st.Subscriptions[0].Paused, []string{held}) {
			return true, ""
		}
		if time.Since(sent) > 2*time.Second {
			seq, sent = seq+1, time.Now()
			publishSeqs(t, c, []string{held}, seq, seq)
		}
		return false, fmt.Sprintf("%+v", st)
	})
	if st := status(); len(st.BackingOff) != 0 || len(st.Subscriptions[0].BackingOff) != 0 {
		t.Fatalf("an operator's pause listed as backing off: %+v", st)
	}
	testenv.Eventually(t, time.Minute, "the metrics of the pause", metrics(map[string]float64{backingOffSeries: 0, pausedSeries: 1}))
	testenv.Eventually(t, time.Minute, "the heartbeat with the pause", func() (bool, string) {
		r := cl.run("nodes", "ls", "--service", procService)
		if r.code != 0 {
			return false, r.stdout + r.stderr
		}
		header := strings.Fields(rowOf(r.stdout, "NODE"))
		row := strings.Fields(rowOf(r.stdout, "node-1"))
		p, b := slices.Index(header, "PAUSED"), slices.Index(header, "BACKING-OFF")
		return p >= 0 && b >= 0 && p < len(row) && row[p] == heldOne && row[b] == "-", r.stdout
	})
	r = cl.run("partitions", "ls", procCategory)
	r.wantCode(t, 0)
	if !strings.Contains(rowOf(r.stdout, held), "PAUSED") || strings.Contains(rowOf(r.stdout, sick), "PAUSED") {
		t.Fatalf("partitions ls: want %s PAUSED and %s not:\n%s", held, sick, r.stdout)
	}
	r = cl.run("check", "--category", procCategory, "--fail-on-status", "PAUSED", "-o", "json")
	r.wantCode(t, clierr.ExitCheckFailed)
	var doc checkDoc
	decode(t, r.stdout, &doc)
	offenders := ""
	for _, ch := range doc.Checks {
		offenders += strings.Join(ch.Offenders, "\n")
	}
	if !strings.Contains(offenders, held+" "+procGroup+": PAUSED") || strings.Contains(offenders, sick) {
		t.Fatalf("check --fail-on-status PAUSED: %s", r.stdout)
	}
	cl.run("check", "--no-backing-off", "--service", procService).wantCode(t, 0)
}
