package admin_test

import (
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/protctl/protctl/internal/admin"
	"github.com/protctl/protctl/internal/handlers"
	"github.com/protctl/protctl/internal/testenv"
)

// The exec queue's gauges read the node's real slots at each scrape, and
// the wait histogram counts every call (0 when a slot was free).
func TestNodeAdminExecQueueMetrics(t *testing.T) {
	m := admin.NewMetrics()
	var b strings.Builder
	if err := m.Write(&b, admin.Snapshot{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "protctl_exec_") {
		t.Fatalf("exec metrics before SetExecQueue:\n%s", b.String())
	}
	slots := handlers.NewSlots(3, m.ObserveExecWait)
	m.SetExecQueue(func() admin.ExecQueue {
		st := slots.Stats()
		return admin.ExecQueue{Slots: st.Size, Running: st.Running, Waiting: st.Waiting}
	})
	m.ObserveExecWait(0)
	m.ObserveExecWait(300 * time.Millisecond)
	b.Reset()
	if err := m.Write(&b, admin.Snapshot{}); err != nil {
		t.Fatal(err)
	}
	fams := testenv.ParseScrape(t, b.String())
	for name, want := range map[string]float64{"protctl_exec_slots": 3, "protctl_exec_running": 0, "protctl_exec_queue_depth": 0} {
		f := fams[name]
		if f == nil || f.GetType() != dto.MetricType_GAUGE || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetGauge().GetValue() != want {
			t.Errorf("%s: %v, want one gauge sample %v", name, f, want)
		}
	}
	if h := fams["protctl_exec_queue_wait_seconds"]; h == nil || h.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("protctl_exec_queue_wait_seconds: %v", h)
	}
	if n, ok := testenv.ScrapeValue(fams, "protctl_exec_queue_wait_seconds_count"); !ok || n != 2 {
		t.Errorf("wait count %v (present %v), want 2", n, ok)
	}
	if n, ok := testenv.ScrapeValue(fams, `protctl_exec_queue_wait_seconds_bucket{le="0.25"}`); !ok || n != 1 {
		t.Errorf("waits <= 0.25s: %v (present %v), want 1 (the 0)", n, ok)
	}
}
