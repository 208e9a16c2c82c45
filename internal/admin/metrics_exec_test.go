package admin_test

import (
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/admin"
	"github.com/protctl/protctl/internal/handlers"
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
	fams, err := parseExposition(b.String())
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	for name, want := range map[string]float64{"protctl_exec_slots": 3, "protctl_exec_running": 0, "protctl_exec_queue_depth": 0} {
		f := fams[name]
		if f == nil || f.typ != "gauge" || len(f.samples) != 1 || f.samples[0].value != want {
			t.Errorf("%s: %+v, want one gauge sample %v", name, f, want)
		}
	}
	h := fams["protctl_exec_queue_wait_seconds"]
	if h == nil || h.typ != "histogram" {
		t.Fatalf("protctl_exec_queue_wait_seconds: %+v", h)
	}
	for _, s := range h.samples {
		if s.name == "protctl_exec_queue_wait_seconds_count" && s.value != 2 {
			t.Errorf("wait count %v, want 2", s.value)
		}
		if s.name == "protctl_exec_queue_wait_seconds_bucket" && s.labels["le"] == "0.25" && s.value != 1 {
			t.Errorf("waits <= 0.25s: %v, want 1 (the 0)", s.value)
		}
	}
}
