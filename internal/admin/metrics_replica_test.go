package admin_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/protctl/protctl/internal/admin"
	"github.com/protctl/protctl/internal/testenv"
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
	fams := testenv.ParseScrape(t, b.String())
	f := fams["protctl_replica_waits_total"]
	if f == nil || f.GetType() != dto.MetricType_COUNTER {
		t.Fatalf("protctl_replica_waits_total: %v", f)
	}
	got := map[string]float64{}
	for _, m := range f.GetMetric() {
		var op, res string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "op":
				op = l.GetValue()
			case "result":
				res = l.GetValue()
			}
		}
		got[op+"/"+res] = m.GetCounter().GetValue()
	}
	want := map[string]float64{"acquire/acked": 1, "acquire/short": 1, "acquire/error": 0, "renew/acked": 1, "renew/short": 0, "renew/error": 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if h := fams["protctl_replica_wait_duration_seconds"]; h == nil || h.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("protctl_replica_wait_duration_seconds: %v", h)
	}
	for _, op := range []string{"acquire", "renew"} {
		if n, ok := testenv.ScrapeValue(fams, `protctl_replica_wait_duration_seconds_count{op="`+op+`"}`); !ok || n != 2 {
			t.Errorf("%s count %v (present %v), want 2", op, n, ok)
		}
	}
}
