package admin_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/admin"
)

// The replica waits are counted by op and result, and timed; nothing is
// written before the first WAIT (a node without lease.waitReplicas).
func TestNodeAdminReplicaWaitMetrics(t *testing.T) {
	m := admin.NewMetrics()
	var b strings.Builder
	if err := m.Write(&b, admin.Snapshot{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "protctl_replica_") {
		t.Fatalf("replica metrics before any WAIT:\n%s", b.String())
	}
	m.ObserveReplicaWait("acquire", 1, 1, time.Millisecond, nil)
	m.ObserveReplicaWait("acquire", 1, 0, 500*time.Millisecond, nil)
	m.ObserveReplicaWait("renew", 1, 1, time.Millisecond, nil)
	m.ObserveReplicaWait("renew", 1, 0, time.Millisecond, errors.New("unreachable"))
	b.Reset()
	if err := m.Write(&b, admin.Snapshot{}); err != nil {
		t.Fatal(err)
	}
	fams, err := parseExposition(b.String())
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	f := fams["protctl_replica_waits_total"]
	if f == nil || f.typ != "counter" {
		t.Fatalf("protctl_replica_waits_total: %+v", f)
	}
	got := map[string]float64{}
	for _, s := range f.samples {
		got[s.labels["op"]+"/"+s.labels["result"]] = s.value
	}
	want := map[string]float64{"acquire/acked": 1, "acquire/short": 1, "acquire/error": 0, "renew/acked": 1, "renew/short": 0, "renew/error": 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	h := fams["protctl_replica_wait_duration_seconds"]
	if h == nil || h.typ != "histogram" {
		t.Fatalf("protctl_replica_wait_duration_seconds: %+v", h)
	}
	for _, s := range h.samples {
		if s.name == "protctl_replica_wait_duration_seconds_count" && s.value != 2 {
			t.Errorf("%s count %v, want 2", s.labels["op"], s.value)
		}
	}
}
