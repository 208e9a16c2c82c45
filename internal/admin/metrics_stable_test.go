package admin_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/protctl/protctl/internal/admin"
	"github.com/protctl/protctl/internal/handlers"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// richNodeScrape scrapes the admin endpoint of a node that has
// everything a family can be written for: partitions held, assigned,
// paused and parked, a lag, a Kafka topic running two configured
// subscriptions (its lease events counted under topic:orders), handler
// calls of every outcome, lease renewals, replica waits and exec slots.
func richNodeScrape(t *testing.T) string {
	t.Helper()
	m := admin.NewMetrics()
	obs := m.Observer(nil)
	obs.OnHandled(runtime.HandledEvent{Subscription: "projector", Duration: time.Millisecond})
	obs.OnHandled(runtime.HandledEvent{Subscription: "projector", Err: errors.New("x"), Class: runtime.FailAggregate, Duration: time.Second})
	obs.OnHandled(runtime.HandledEvent{Subscription: "ledger-sync", Duration: 2 * time.Millisecond})
	obs.OnParked(ledger.Parked{Subscription: "projector", Aggregate: "k1"})
	obs.OnResolved(runtime.ResolvedEvent{Subscription: "projector"})
	obs.OnLease(runtime.LeaseEvent{Subscription: "projector", Kind: runtime.LeaseAcquired})
	obs.OnLease(runtime.LeaseEvent{Subscription: "topic:orders", Kind: runtime.LeaseAcquired})
	obs.OnLease(runtime.LeaseEvent{Subscription: "topic:orders", Kind: runtime.LeaseLost})
	m.ObserveRenew(3*time.Millisecond, nil)
	m.ObserveRenew(30*time.Millisecond, errors.New("down"))
	m.ObserveReplicaWait("acquire", 1, 1, time.Millisecond, nil)
	m.ObserveReplicaWait("renew", 1, 0, time.Millisecond, nil)
	slots := handlers.NewSlots(2, m.ObserveExecWait)
	m.SetExecQueue(func() admin.ExecQueue {
		st := slots.Stats()
		return admin.ExecQueue{Slots: st.Size, Running: st.Running, Waiting: st.Waiting}
	})
	m.ObserveExecWait(0)

	node := &fakeNode{join: runtime.JoinJoined, st: runtime.NodeStatus{Service: "shop", Node: "n1", StartedAt: time.Unix(1700000000, 0)}}
	node.subs = []runtime.Subscription{
		&fakeSub{st: runtime.SubscriptionStatus{
			Name: "projector", Source: source.Redis, State: runtime.StateRunning,
			Held:     []runtime.HeldPartition{{Subscription: "projector", Partition: "k1"}, {Subscription: "projector", Partition: "k2"}},
			Paused:   []string{"k2"},
			Parked:   3,
			Counters: map[string]int64{runtime.CounterAssigned: 4},
		}},
		&topicSubs{fakeSub: fakeSub{st: runtime.SubscriptionStatus{Name: "topic:orders", Source: source.Kafka, State: runtime.StateRunning}},
			members: []runtime.SubscriptionStatus{
				{Name: "ledger-sync", Source: source.Kafka, State: runtime.StateRunning, Parked: 1,
					Held:     []runtime.HeldPartition{{Subscription: "ledger-sync", Partition: "0"}},
					Counters: map[string]int64{runtime.CounterAssigned: 1}},
				{Name: "fraud", Source: source.Kafka, State: runtime.StateFailed},
			}},
	}
	_, base := newServer(t, admin.Config{Listen: "127.0.0.1:0", Node: node, Metrics: m,
		Lag: func(context.Context) (map[string]int64, error) {
			return map[string]int64{"projector": 7, "ledger-sync": 2}, nil
		}})
	code, body, _ := get(t, base+"/metrics", "")
	if code != 200 {
		t.Fatalf("/metrics: %d\n%s", code, body)
	}
	return body
}

// protctlFamilies is every protctl_* family of a node's /metrics as the
// hand-written exposition wrote it before client_golang served it
// (commit 3a024a9): its type, help and label names. A change to any of
// them breaks dashboards and alerts and is a breaking change to be
// written in CHANGELOG.md.
var protctlFamilies = map[string]struct {
	typ    dto.MetricType
	labels []string // sorted; a histogram's without le
	help   string
}{
	"protctl_node_info":                     {dto.MetricType_GAUGE, []string{"join_state", "node", "service"}, "The node's identity; the value is always 1."},
	"protctl_node_ready":                    {dto.MetricType_GAUGE, nil, "1 when the node has joined its service (the /readyz answer), else 0."},
	"protctl_node_start_time_seconds":       {dto.MetricType_GAUGE, nil, "When the node started, in seconds since the Unix epoch."},
	"protctl_partitions_held":               {dto.MetricType_GAUGE, []string{"subscription"}, "Partitions whose lease this node holds, by subscription."},
	"protctl_partitions_assigned":           {dto.MetricType_GAUGE, []string{"subscription"}, "Partitions rendezvous hashing gives this node (held or idle), by subscription."},
	"protctl_partitions_paused":             {dto.MetricType_GAUGE, []string{"subscription"}, "Partitions paused by a systemic failure, by subscription."},
	"protctl_partitions_operator_paused":    {dto.MetricType_GAUGE, []string{"subscription"}, "Partitions held by an operator's pause (protctl pause), by subscription: their lag keeps growing on purpose."},
	"protctl_parked":                        {dto.MetricType_GAUGE, []string{"subscription"}, "Aggregates (Redis: partition keys) of this node's partitions parked in the failure ledger, by subscription."},
	"protctl_subscription_up":               {dto.MetricType_GAUGE, []string{"state", "subscription"}, "1 while the subscription handles messages (state running), else 0; state is new, joining, unavailable, running, stopping, stopped or failed."},
	"protctl_lag":                           {dto.MetricType_GAUGE, []string{"subscription"}, "Entries (Redis) or offsets (Kafka) not yet handled on the partitions this node is given, by subscription."},
	"protctl_messages_processed_total":      {dto.MetricType_COUNTER, []string{"subscription"}, "Handler calls that succeeded, by subscription."},
	"protctl_messages_failed_total":         {dto.MetricType_COUNTER, []string{"class", "subscription"}, "Handler calls that failed, by subscription and failure class (aggregate, systemic, fatal)."},
	"protctl_parked_total":                  {dto.MetricType_COUNTER, []string{"subscription"}, "Aggregates (Redis: partition keys) this node parked after their retries ran out, by subscription."},
	"protctl_resolved_total":                {dto.MetricType_COUNTER, []string{"subscription"}, "Parked entries this node resolved after an operator's retry or skip, by subscription."},
	"protctl_lease_events_total":            {dto.MetricType_COUNTER, []string{"event", "subscription"}, "Lease changes (acquired, released, lost, untrusted, contested), by subscription."},
	"protctl_handler_duration_seconds":      {dto.MetricType_HISTOGRAM, []string{"subscription"}, "Time spent in the handler per call, by subscription."},
	"protctl_lease_renew_duration_seconds":  {dto.MetricType_HISTOGRAM, nil, "Latency of lease renewal calls (one round trip renews a batch of leases)."},
	"protctl_lease_renew_failures_total":    {dto.MetricType_COUNTER, nil, "Lease renewal calls that failed (the store could not be reached)."},
	"protctl_replica_waits_total":           {dto.MetricType_COUNTER, []string{"op", "result"}, "WAITs for replica acknowledgements after lease writes (lease.waitReplicas), by op (acquire, renew) and result (acked; short: fewer replicas within lease.waitTimeout, the write failed; error: the WAIT failed)."},
	"protctl_replica_wait_duration_seconds": {dto.MetricType_HISTOGRAM, []string{"op"}, "Time each WAIT for replica acknowledgements took, by op."},
	"protctl_exec_slots":                    {dto.MetricType_GAUGE, nil, "The bound of exec handler commands running at once on this node (handlers.execConcurrency)."},
	"protctl_exec_running":                  {dto.MetricType_GAUGE, nil, "Exec handler commands running now."},
	"protctl_exec_queue_depth":              {dto.MetricType_GAUGE, nil, "Exec handler calls waiting for a slot now."},
	"protctl_exec_queue_wait_seconds":       {dto.MetricType_HISTOGRAM, nil, "Time each exec handler call waited for a slot before its command started (0 when one was free; not part of exec.timeout)."},
}

// Every protctl_* family a node wrote before client_golang served its
// /metrics is still there with the same type, help and label names, and
// there is no other; the series of each are the ones the node has.
func TestNodeAdminMetricFamiliesStable(t *testing.T) {
	body := richNodeScrape(t)
	fams := testenv.ParseScrape(t, body)
	for name, want := range protctlFamilies {
		f := fams[name]
		if f == nil {
			t.Errorf("no family %s", name)
			continue
		}
		if f.GetType() != want.typ || f.GetHelp() != want.help {
			t.Errorf("%s: %s %q, want %s %q", name, f.GetType(), f.GetHelp(), want.typ, want.help)
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName())
			}
			slices.Sort(labels)
			if !slices.Equal(labels, want.labels) {
				t.Errorf("%s: a series labelled %v, want %v", name, labels, want.labels)
			}
		}
	}
	for name := range fams {
		if _, ok := protctlFamilies[name]; !ok && len(name) > 8 && name[:8] == "protctl_" {
			t.Errorf("a new family %s: add it to protctlFamilies (and CHANGELOG.md)", name)
		}
	}
	// The series: one per configured subscription (never topic:orders),
	// each failure class, each replica result.
	for series, want := range map[string]float64{
		`protctl_node_info{service="shop",node="n1",join_state="joined"}`: 1,
		`protctl_node_ready`:                                                           1,
		`protctl_node_start_time_seconds`:                                              1700000000,
		`protctl_partitions_held{subscription="projector"}`:                            2,
		`protctl_partitions_held{subscription="ledger-sync"}`:                          1,
		`protctl_partitions_assigned{subscription="projector"}`:                        4,
		`protctl_partitions_assigned{subscription="ledger-sync"}`:                      1,
		`protctl_partitions_paused{subscription="projector"}`:                          1,
		`protctl_partitions_paused{subscription="fraud"}`:                              0,
		`protctl_parked{subscription="projector"}`:                                     3,
		`protctl_parked{subscription="ledger-sync"}`:                                   1,
		`protctl_subscription_up{subscription="projector",state="running"}`:            1,
		`protctl_subscription_up{subscription="fraud",state="failed"}`:                 0,
		`protctl_lag{subscription="projector"}`:                                        7,
		`protctl_lag{subscription="ledger-sync"}`:                                      2,
		`protctl_messages_processed_total{subscription="projector"}`:                   1,
		`protctl_messages_processed_total{subscription="ledger-sync"}`:                 1,
		`protctl_messages_processed_total{subscription="fraud"}`:                       0,
		`protctl_messages_failed_total{subscription="projector",class="aggregate"}`:    1,
		`protctl_messages_failed_total{subscription="projector",class="systemic"}`:     0,
		`protctl_messages_failed_total{subscription="projector",class="fatal"}`:        0,
		`protctl_parked_total{subscription="projector"}`:                               1,
		`protctl_resolved_total{subscription="projector"}`:                             1,
		`protctl_lease_events_total{subscription="projector",event="acquired"}`:        1,
		`protctl_lease_events_total{subscription="ledger-sync",event="acquired"}`:      1,
		`protctl_lease_events_total{subscription="fraud",event="lost"}`:                1,
		`protctl_handler_duration_seconds_count{subscription="projector"}`:             2,
		`protctl_handler_duration_seconds_bucket{subscription="projector",le="0.001"}`: 1,
		`protctl_handler_duration_seconds_bucket{subscription="projector",le="+Inf"}`:  2,
		`protctl_handler_duration_seconds_sum{subscription="projector"}`:               1.001,
		`protctl_lease_renew_duration_seconds_count`:                                   2,
		`protctl_lease_renew_failures_total`:                                           1,
		`protctl_replica_waits_total{op="acquire",result="acked"}`:                     1,
		`protctl_replica_waits_total{op="renew",result="short"}`:                       1,
		`protctl_replica_waits_total{op="renew",result="error"}`:                       0,
		`protctl_replica_wait_duration_seconds_count{op="renew"}`:                      1,
		`protctl_exec_slots`:                                 2,
		`protctl_exec_running`:                               0,
		`protctl_exec_queue_depth`:                           0,
		`protctl_exec_queue_wait_seconds_bucket{le="0.001"}`: 1,
	} {
		if v, ok := testenv.ScrapeValue(fams, series); !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}
	for _, absent := range []string{`protctl_lag{subscription="fraud"}`, `protctl_messages_processed_total{subscription="topic:orders"}`,
		`protctl_partitions_held{subscription="fraud"}`} {
		if _, ok := testenv.ScrapeValue(fams, absent); ok {
			t.Errorf("a series %s", absent)
		}
	}
	if t.Failed() {
		t.Logf("the scrape:\n%s", body)
	}
}
