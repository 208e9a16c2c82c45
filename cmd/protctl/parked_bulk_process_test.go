package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/audit"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// binRun prepares the protctl binary against redisURL, without a
// terminal, with an empty home and nothing else from the environment.
func binRun(t *testing.T, bin, redisURL string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	home := t.TempDir()
	cmd.Env = []string{"PROTCTL_REDIS=" + redisURL, "HOME=" + home, "XDG_CONFIG_HOME=" + home, "PATH=" + os.Getenv("PATH")}
	return cmd
}

// runBin runs the binary to its end and returns stdout, stderr and the
// exit code.
func runBin(t *testing.T, bin, redisURL string, args ...string) (string, string, int) {
	t.Helper()
	cmd := binRun(t, bin, redisURL, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// requestsOf reads the entries of sub whose request carries token: the
// aggregate -> when it was requested.
func requestsOf(t *testing.T, store *redisstore.Store, sub, token string) map[string]time.Time {
	t.Helper()
	ps, err := store.ListParked(context.Background(), sub)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	for _, p := range ps {
		if p.Request != nil && p.Request.Token == token {
			out[p.Aggregate] = p.Request.RequestedAt
		}
	}
	return out
}

// TestBulkRetryOfAThousandResumesAfterSIGKILL is issue 23's bulk
// acceptance, through the binary on a real redis-server: a filtered retry
// of 1,000 parked aggregates, saved as a plan, applied with --rps and
// SIGKILLed half way, then resumed from the same file, while new matching
// entries are parked all along. It checks that the apply requested
// exactly the planned set, each aggregate exactly once (the ledger's
// requests and markers, and the audit log), and nothing it did not plan.
func TestBulkRetryOfAThousandResumesAfterSIGKILL(t *testing.T) {
	bin := buildProtctl(t)
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	store := redisstore.New(c)
	const (
		sub     = "app.BillingProjector"
		planned = 1000
		billing = "http POST http://billing: 503 Service Unavailable"
	)
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	fence := func(key string) broker.Fence {
		return broker.Fence{LeaseKey: broker.ProteanLayout.LeaseKey(sub, key), Token: "node-a:1"}
	}
	park := func(key, errText string, age time.Duration) {
		t.Helper()
		f := fence(key)
		if err := c.Set(ctx, f.LeaseKey, f.Token, 0).Err(); err != nil {
			t.Error(err)
			return
		}
		p := ledger.Parked{Subscription: sub, Source: source.Redis, Aggregate: key, Category: "shop::bill",
			Partition: key, Position: "1700000000000-0", Error: errText, Attempts: 3,
			ParkedAt: now.Add(-age), LastAttemptAt: now.Add(-age), Owner: "node-a", Generation: 1}
		if err := store.Park(ctx, f, p); err != nil {
			t.Error(err)
		}
	}
	setupStart := time.Now()
	for i := range planned {
		park(fmt.Sprintf("a-%04d", i), billing, time.Hour+time.Duration(i)*time.Millisecond)
	}
	for i := range 50 {
		park(fmt.Sprintf("d-%02d", i), "validate: amount must be positive", time.Hour) // another class
		park(fmt.Sprintf("y-%02d", i), billing, time.Minute)                           // too young
	}

	t.Logf("parked %d entries in %s", planned+100, time.Since(setupStart).Round(time.Millisecond))
	dir := t.TempDir()
	planPath := filepath.Join(dir, "retry.json")
	out, errOut, code := runBin(t, bin, srv.URL(), "parked", "retry", "--subscription", sub,
		"--error-class", "http POST http://billing", "--older-than", "10m", "--dry-run", "-o", "json")
	if code != 0 {
		t.Fatalf("plan: exit %d\n%s", code, errOut)
	}
	if err := os.WriteFile(planPath, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	var plan bulkDoc
	decode(t, out, &plan)
	if plan.Selection == nil || plan.Selection.Count != planned || len(plan.Items) != planned {
		t.Fatalf("the plan selected %+v, %d items; want %d", plan.Selection, len(plan.Items), planned)
	}
	inPlan := map[string]bool{}
	for _, it := range plan.Items {
		inPlan[it.Target["aggregate"]] = true
	}

	// New entries matching the filter keep arriving while the plan is
	// applied, killed and resumed.
	stopParking := make(chan struct{})
	var parkers sync.WaitGroup
	var arrived []string
	parkers.Add(1)
	go func() {
		defer parkers.Done()
		for i := 0; ; i++ {
			select {
			case <-stopParking:
				return
			case <-time.After(5 * time.Millisecond):
			}
			key := fmt.Sprintf("n-%04d", i)
			park(key, billing, 2*time.Hour)
			arrived = append(arrived, key)
		}
	}()

	// The first run, paced, is killed once a part of the plan is applied.
	first := binRun(t, bin, srv.URL(), "apply", "-f", planPath, "--rps", "100", "--yes", "-o", "json")
	var firstErr bytes.Buffer
	first.Stderr = &firstErr
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for len(requestsOf(t, store, sub, plan.ID)) < 200 {
		if time.Now().After(deadline) {
			_ = first.Process.Kill()
			t.Fatalf("the first run did not request 200 entries in time:\n%s", firstErr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	if ws, ok := first.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the first run was not killed: %v\n%s", first.ProcessState, firstErr.String())
	}
	before := requestsOf(t, store, sub, plan.ID)
	if len(before) == 0 || len(before) >= planned {
		t.Fatalf("the killed run requested %d of %d entries: not an interruption half way", len(before), planned)
	}

	// The resumed run applies the rest.
	resumeStart := time.Now()
	out, errOut, code = runBin(t, bin, srv.URL(), "apply", "-f", planPath, "--yes", "-o", "json")
	close(stopParking)
	parkers.Wait()
	if code != 0 {
		t.Fatalf("resume: exit %d\n%s", code, errOut)
	}
	var resumed bulkDoc
	decode(t, out, &resumed)
	results := map[string]string{}
	for _, it := range resumed.Items {
		results[it.Target["aggregate"]] = it.result()
	}
	for agg := range inPlan {
		_, requestedBefore := before[agg]
		want := "applied"
		if requestedBefore {
			want = "done"
		}
		if results[agg] != want {
			t.Fatalf("%s: the resumed run says %q, want %q (requested by the killed run: %v)", agg, results[agg], want, requestedBefore)
		}
	}
	t.Logf("killed run requested %d, the resumed run %d (in %s, unpaced, with the %d done found); %d entries parked during the runs",
		len(before), planned-len(before), time.Since(resumeStart).Round(time.Millisecond), len(before), len(arrived))

	// The ledger: every planned entry has exactly the request the plan's
	// marker recorded (one per entry and plan, written with it); the
	// killed run's requests are unchanged; nothing else was requested.
	after := requestsOf(t, store, sub, plan.ID)
	if len(after) != planned {
		t.Fatalf("%d entries carry the plan's request, want %d", len(after), planned)
	}
	for agg, at := range after {
		if !inPlan[agg] {
			t.Fatalf("%s, not in the plan, was requested", agg)
		}
		if b, ok := before[agg]; ok && !b.Equal(at) {
			t.Fatalf("%s was requested again by the resumed run (%s, first at %s)", agg, at, b)
		}
		f := fence(agg)
		raw, err := c.Get(ctx, redisstore.RequestMarkerKey(redisstore.RecordKey(f.LeaseKey, sub, agg), plan.ID)).Result()
		if err != nil {
			t.Fatalf("%s: no marker: %v", agg, err)
		}
		var m struct{ At time.Time }
		if err := json.Unmarshal([]byte(raw), &m); err != nil || !m.At.Equal(at) {
			t.Fatalf("%s: marker %s does not match the request at %s", agg, raw, at)
		}
	}
	ps, err := store.ListParked(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	newOnes := 0
	for _, p := range ps {
		if !inPlan[p.Aggregate] && p.Request != nil {
			t.Fatalf("%s, outside the plan, has request %+v", p.Aggregate, p.Request)
		}
		if strings.HasPrefix(p.Aggregate, "n-") {
			newOnes++
		}
	}
	if newOnes == 0 || newOnes != len(arrived) {
		t.Fatalf("%d new entries in the ledger, %d parked during the runs", newOnes, len(arrived))
	}

	// The audit log: the killed run left its "started" entry (written
	// before its first item) and no end; the resumed run its "started"
	// and its end, which accounts for every planned aggregate once:
	// applied by it, or done by the killed run. No aggregate is applied
	// twice over the whole log.
	entries, err := audit.List(ctx, c, audit.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	appliedTimes := map[string]int{}
	seen := map[string]int{}
	for _, e := range entries {
		if e.PlanID != plan.ID {
			t.Fatalf("audit entry %s names plan %q, want %q", e.ID, e.PlanID, plan.ID)
		}
		outcomes = append(outcomes, e.Outcome)
		for _, it := range e.Items {
			switch it.Result {
			case repair.ResultApplied:
				appliedTimes[it.Target.Aggregate]++
				seen[it.Target.Aggregate]++
			case repair.ResultDone:
				seen[it.Target.Aggregate]++
			}
		}
	}
	// Newest first.
	if strings.Join(outcomes, ",") != "applied,started,started" || len(entries[0].Items) != planned || entries[0].ItemsOmitted != 0 {
		t.Fatalf("audit outcomes %v, want the resumed run's end and two starts, with %d items", outcomes, planned)
	}
	for agg := range inPlan {
		_, requestedBefore := before[agg]
		if seen[agg] != 1 || (appliedTimes[agg] == 1) == requestedBefore {
			t.Fatalf("%s: in the audit log %d times, applied %d times (requested by the killed run: %v)", agg, seen[agg], appliedTimes[agg], requestedBefore)
		}
	}
}
