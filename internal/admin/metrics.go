package admin

import (
	"bufio"
	"io"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
)

// Bucket bounds of the latency histograms, in seconds.
var (
	HandlerBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	RenewBuckets   = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}
)

// Metrics counts what the runtime reports through its Observer hooks and
// the lease renewals timed by the caller (ObserveRenew), and writes them,
// with gauges read from the node's status, in the Prometheus text format.
// Every method is safe for concurrent use; the hooks take no lock on the
// hot path once a subscription has been seen.
type Metrics struct {
	subs sync.Map // subscription name -> *subMetrics

	renew         *histogram
	renewFailures atomic.Uint64

	execWait  *histogram
	execQueue atomic.Pointer[func() ExecQueue]

	// replicaWaits counts the WAITs for replica acknowledgements, by op
	// (string -> *replicaOp).
	replicaWaits sync.Map
}

// Replica wait outcomes, the result label of protctl_replica_waits_total.
const (
	ReplicaAcked = "acked" // enough replicas acknowledged
	ReplicaShort = "short" // fewer within the timeout: the call failed with broker.ErrNotReplicated
	ReplicaError = "error" // the WAIT itself failed (the server unreachable)
)

var replicaResults = []string{ReplicaAcked, ReplicaShort, ReplicaError}

type replicaOp struct {
	results  [3]atomic.Uint64 // by replicaResults
	duration *histogram
}

// ExecQueue is the state of a node's exec handler slots (the bound of exec
// commands running at once) at one moment.
type ExecQueue struct {
	Slots   int // the bound
	Running int // commands running
	Waiting int // calls waiting for a slot
}

type subMetrics struct {
	processed atomic.Uint64
	failed    [3]atomic.Uint64 // by runtime.FailureClass
	parked    atomic.Uint64
	resolved  atomic.Uint64
	handler   *histogram

	mu     sync.Mutex
	leases map[runtime.LeaseEventKind]uint64
}

// NewMetrics returns empty metrics.
func NewMetrics() *Metrics {
	return &Metrics{renew: newHistogram(RenewBuckets), execWait: newHistogram(HandlerBuckets)}
}

// SetExecQueue makes each scrape read the exec slots' state from f (the
// node's handlers.Slots), for the protctl_exec_* gauges; until it is
// called they are left out.
func (m *Metrics) SetExecQueue(f func() ExecQueue) { m.execQueue.Store(&f) }

// ObserveExecWait records how long one exec handler call waited for a
// slot (0 when one was free). It is the hook handlers.NewSlots takes.
func (m *Metrics) ObserveExecWait(d time.Duration) { m.execWait.observe(d.Seconds()) }

func (m *Metrics) sub(name string) *subMetrics {
	if s, ok := m.subs.Load(name); ok {
		return s.(*subMetrics)
	}
	s, _ := m.subs.LoadOrStore(name, &subMetrics{handler: newHistogram(HandlerBuckets), leases: map[runtime.LeaseEventKind]uint64{}})
	return s.(*subMetrics)
}

// Observer returns hooks that count into m and then call next's (nil for
// none), so that the node can have other observers too.
func (m *Metrics) Observer(next *runtime.Observer) *runtime.Observer {
	if next == nil {
		next = &runtime.Observer{}
	}
	return &runtime.Observer{
		OnHandled: func(e runtime.HandledEvent) {
			s := m.sub(e.Subscription)
			if e.Err == nil {
				s.processed.Add(1)
			} else if c := int(e.Class); c >= 0 && c < len(s.failed) {
				s.failed[c].Add(1)
			}
			s.handler.observe(e.Duration.Seconds())
			if next.OnHandled != nil {
				next.OnHandled(e)
			}
		},
		OnParked: func(p runtime.Parked) {
			m.sub(p.Subscription).parked.Add(1)
			if next.OnParked != nil {
				next.OnParked(p)
			}
		},
		OnResolved: func(e runtime.ResolvedEvent) {
			m.sub(e.Subscription).resolved.Add(1)
			if next.OnResolved != nil {
				next.OnResolved(e)
			}
		},
		OnLease: func(e runtime.LeaseEvent) {
			s := m.sub(e.Subscription)
			s.mu.Lock()
			s.leases[e.Kind]++
			s.mu.Unlock()
			if next.OnLease != nil {
				next.OnLease(e)
			}
		},
		OnMissing:    next.OnMissing,
		OnPause:      next.OnPause,
		OnAssignment: next.OnAssignment,
		OnFatal:      next.OnFatal,
		OnError:      next.OnError,
	}
}

// ObserveRenew records one lease renewal call (one lease, or a batch in
// one round trip) that took d; err non-nil counts a failed call.
func (m *Metrics) ObserveRenew(d time.Duration, err error) {
	m.renew.observe(d.Seconds())
	if err != nil {
		m.renewFailures.Add(1)
	}
}

// ObserveReplicaWait records one WAIT for replica acknowledgements after
// a write of op ("acquire", "renew", "publish"): want replicas asked for,
// acked those that answered within the timeout, d the WAIT's round trip,
// err a failure of the WAIT itself.
func (m *Metrics) ObserveReplicaWait(op string, want, acked int, d time.Duration, err error) {
	v, ok := m.replicaWaits.Load(op)
	if !ok {
		v, _ = m.replicaWaits.LoadOrStore(op, &replicaOp{duration: newHistogram(RenewBuckets)})
	}
	r := v.(*replicaOp)
	switch {
	case err != nil:
		r.results[2].Add(1)
	case acked < want:
		r.results[1].Add(1)
	default:
		r.results[0].Add(1)
	}
	r.duration.observe(d.Seconds())
}

// Snapshot is what the gauges are read from at each scrape.
type Snapshot struct {
	Status        runtime.NodeStatus
	Ready         bool
	Subscriptions []runtime.SubscriptionStatus
	// Members are the subscriptions as configured, which every
	// per-subscription metric is labelled by: a Kafka topic's
	// subscriptions one by one, not under Subscriptions' "topic:<topic>".
	// nil: Subscriptions.
	Members []runtime.SubscriptionStatus
	// Groups maps the name of a subscription that runs several (a
	// topic's "topic:<topic>", which its lease events carry) to their
	// names, so that what is counted under it is reported under each.
	Groups map[string][]string
	// Lag is the number of entries (Redis) or offsets (Kafka) not yet
	// handled on the partitions this node is given, by subscription; a
	// subscription whose lag is unknown is absent.
	Lag map[string]int64
}

// Write writes every metric in the text format.
func (m *Metrics) Write(w io.Writer, s Snapshot) error {
	bw := bufio.NewWriter(w)
	e := &expo{w: bw}
	st := s.Status

	e.family("protctl_node_info", "gauge", "The node's identity; the value is always 1.")
	e.sample("protctl_node_info", []label{{"service", st.Service}, {"node", st.Node}, {"join_state", string(st.JoinState)}}, 1)
	e.family("protctl_node_ready", "gauge", "1 when the node has joined its service (the /readyz answer), else 0.")
	e.sample("protctl_node_ready", nil, b2f(s.Ready))
	e.family("protctl_node_start_time_seconds", "gauge", "When the node started, in seconds since the Unix epoch.")
	e.sample("protctl_node_start_time_seconds", nil, unixSeconds(st.StartedAt))

	// Gauges from the subscriptions' status (no I/O), labelled with the
	// configured names, as the counters and the lag are.
	members := s.Members
	if members == nil {
		members = s.Subscriptions
	}
	held := map[string]int{}
	for _, ss := range members {
		for _, h := range ss.Held {
			held[h.Subscription]++
		}
	}
	names := make([]string, 0, len(members))
	byName := map[string]runtime.SubscriptionStatus{}
	for _, ss := range members {
		names = append(names, ss.Name)
		byName[ss.Name] = ss
	}
	heldNames := sortedKeys(held)
	e.family("protctl_partitions_held", "gauge", "Partitions whose lease this node holds, by subscription.")
	for _, n := range heldNames {
		e.sample("protctl_partitions_held", []label{{"subscription", n}}, float64(held[n]))
	}
	e.family("protctl_partitions_assigned", "gauge", "Partitions rendezvous hashing gives this node (held or idle), by subscription.")
	for _, n := range names {
		if v, ok := byName[n].Counters[runtime.CounterAssigned]; ok {
			e.sample("protctl_partitions_assigned", []label{{"subscription", n}}, float64(v))
		}
	}
	e.family("protctl_partitions_paused", "gauge", "Partitions paused by a systemic failure, by subscription.")
	for _, n := range names {
		e.sample("protctl_partitions_paused", []label{{"subscription", n}}, float64(len(byName[n].Paused)))
	}
	e.family("protctl_partitions_operator_paused", "gauge", "Partitions held by an operator's pause (protctl pause), by subscription: their lag keeps growing on purpose.")
	for _, n := range names {
		e.sample("protctl_partitions_operator_paused", []label{{"subscription", n}}, float64(len(byName[n].OperatorPaused)))
	}
	e.family("protctl_parked", "gauge", "Aggregates (Redis: partition keys) of this node's partitions parked in the failure ledger, by subscription.")
	for _, n := range names {
		e.sample("protctl_parked", []label{{"subscription", n}}, float64(byName[n].Parked))
	}
	e.family("protctl_subscription_up", "gauge", "1 while the subscription handles messages (state running), else 0; state is new, joining, unavailable, running, stopping, stopped or failed.")
	for _, n := range names {
		e.sample("protctl_subscription_up", []label{{"subscription", n}, {"state", string(byName[n].State)}}, b2f(byName[n].State == runtime.StateRunning))
	}
	if s.Lag != nil {
		e.family("protctl_lag", "gauge", "Entries (Redis) or offsets (Kafka) not yet handled on the partitions this node is given, by subscription.")
		for _, n := range sortedKeys(s.Lag) {
			e.sample("protctl_lag", []label{{"subscription", n}}, float64(s.Lag[n]))
		}
	}

	// Counters and histograms from the hooks. What was counted under a
	// group's name (a topic's lease events) is reported under each of
	// its subscriptions instead.
	var subNames []string
	m.subs.Range(func(k, _ any) bool {
		if _, group := s.Groups[k.(string)]; !group {
			subNames = append(subNames, k.(string))
		}
		return true
	})
	for _, ms := range s.Groups {
		for _, n := range ms {
			if !slices.Contains(subNames, n) {
				subNames = append(subNames, n)
			}
		}
	}
	sort.Strings(subNames)
	subs := make([]*subMetrics, len(subNames))
	leases := make([]map[runtime.LeaseEventKind]uint64, len(subNames))
	for i, n := range subNames {
		subs[i] = m.sub(n)
		leases[i] = subs[i].leaseCounts(nil)
	}
	for g, ms := range s.Groups {
		gs, ok := m.subs.Load(g)
		if !ok {
			continue
		}
		for i, n := range subNames {
			if slices.Contains(ms, n) {
				leases[i] = gs.(*subMetrics).leaseCounts(leases[i])
			}
		}
	}
	e.family("protctl_messages_processed_total", "counter", "Handler calls that succeeded, by subscription.")
	for i, n := range subNames {
		e.sample("protctl_messages_processed_total", []label{{"subscription", n}}, float64(subs[i].processed.Load()))
	}
	e.family("protctl_messages_failed_total", "counter", "Handler calls that failed, by subscription and failure class (aggregate, systemic, fatal).")
	for i, n := range subNames {
		for c := range subs[i].failed {
			e.sample("protctl_messages_failed_total", []label{{"subscription", n}, {"class", runtime.FailureClass(c).String()}}, float64(subs[i].failed[c].Load()))
		}
	}
	e.family("protctl_parked_total", "counter", "Aggregates (Redis: partition keys) this node parked after their retries ran out, by subscription.")
	for i, n := range subNames {
		e.sample("protctl_parked_total", []label{{"subscription", n}}, float64(subs[i].parked.Load()))
	}
	e.family("protctl_resolved_total", "counter", "Parked entries this node resolved after an operator's retry or skip, by subscription.")
	for i, n := range subNames {
		e.sample("protctl_resolved_total", []label{{"subscription", n}}, float64(subs[i].resolved.Load()))
	}
	e.family("protctl_lease_events_total", "counter", "Lease changes (acquired, released, lost, untrusted, contested), by subscription.")
	for i, n := range subNames {
		for _, k := range sortedKeys(leases[i]) {
			e.sample("protctl_lease_events_total", []label{{"subscription", n}, {"event", string(k)}}, float64(leases[i][k]))
		}
	}
	e.family("protctl_handler_duration_seconds", "histogram", "Time spent in the handler per call, by subscription.")
	for i, n := range subNames {
		e.histogram("protctl_handler_duration_seconds", []label{{"subscription", n}}, subs[i].handler)
	}
	e.family("protctl_lease_renew_duration_seconds", "histogram", "Latency of lease renewal calls (one round trip renews a batch of leases).")
	e.histogram("protctl_lease_renew_duration_seconds", nil, m.renew)
	e.family("protctl_lease_renew_failures_total", "counter", "Lease renewal calls that failed (the store could not be reached).")
	e.sample("protctl_lease_renew_failures_total", nil, float64(m.renewFailures.Load()))
	var replicaOps []string
	m.replicaWaits.Range(func(k, _ any) bool {
		replicaOps = append(replicaOps, k.(string))
		return true
	})
	if len(replicaOps) > 0 {
		sort.Strings(replicaOps)
		e.family("protctl_replica_waits_total", "counter", "WAITs for replica acknowledgements after lease writes (lease.waitReplicas), by op (acquire, renew) and result (acked; short: fewer replicas within lease.waitTimeout, the write failed; error: the WAIT failed).")
		for _, op := range replicaOps {
			r, _ := m.replicaWaits.Load(op)
			for i, res := range replicaResults {
				e.sample("protctl_replica_waits_total", []label{{"op", op}, {"result", res}}, float64(r.(*replicaOp).results[i].Load()))
			}
		}
		e.family("protctl_replica_wait_duration_seconds", "histogram", "Time each WAIT for replica acknowledgements took, by op.")
		for _, op := range replicaOps {
			r, _ := m.replicaWaits.Load(op)
			e.histogram("protctl_replica_wait_duration_seconds", []label{{"op", op}}, r.(*replicaOp).duration)
		}
	}
	if f := m.execQueue.Load(); f != nil {
		q := (*f)()
		e.family("protctl_exec_slots", "gauge", "The bound of exec handler commands running at once on this node (handlers.execConcurrency).")
		e.sample("protctl_exec_slots", nil, float64(q.Slots))
		e.family("protctl_exec_running", "gauge", "Exec handler commands running now.")
		e.sample("protctl_exec_running", nil, float64(q.Running))
		e.family("protctl_exec_queue_depth", "gauge", "Exec handler calls waiting for a slot now.")
		e.sample("protctl_exec_queue_depth", nil, float64(q.Waiting))
		e.family("protctl_exec_queue_wait_seconds", "histogram", "Time each exec handler call waited for a slot before its command started (0 when one was free; not part of exec.timeout).")
		e.histogram("protctl_exec_queue_wait_seconds", nil, m.execWait)
	}
	return bw.Flush()
}

// leaseCounts adds s's lease event counts to into (a new map when nil).
func (s *subMetrics) leaseCounts(into map[runtime.LeaseEventKind]uint64) map[runtime.LeaseEventKind]uint64 {
	if into == nil {
		into = map[runtime.LeaseEventKind]uint64{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.leases {
		into[k] += v
	}
	return into
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

func sortedKeys[K ~string, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// histogram is a fixed-bucket histogram updated with atomics.
type histogram struct {
	bounds  []float64
	counts  []atomic.Uint64 // per bucket, not cumulative; the last is +Inf
	sumBits atomic.Uint64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v) // first bound >= v: le is inclusive
	h.counts[i].Add(1)
	for {
		old := h.sumBits.Load()
		if h.sumBits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

func (h *histogram) snapshot() ([]uint64, float64) {
	out := make([]uint64, len(h.counts))
	for i := range h.counts {
		out[i] = h.counts[i].Load()
	}
	return out, math.Float64frombits(h.sumBits.Load())
}
