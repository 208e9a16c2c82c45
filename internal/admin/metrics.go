package admin

import (
	"io"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

// Bucket bounds of the latency histograms, in seconds.
var (
	HandlerBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	RenewBuckets   = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}
)

// Metrics counts what the runtime reports through its Observer hooks and
// the lease renewals timed by the caller (ObserveRenew); a scrape reports
// them, with gauges read from the node's status, through client_golang.
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

	descs descs
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
	return &Metrics{renew: newHistogram(RenewBuckets), execWait: newHistogram(HandlerBuckets), descs: newDescs()}
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
		OnParked: func(p ledger.Parked) {
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

// Write writes every metric of s (not the Go and process collectors'
// a Server adds) in the Prometheus text format, as a scrape of the
// admin endpoint would.
func (m *Metrics) Write(w io.Writer, s Snapshot) error {
	reg := prometheus.NewRegistry()
	if err := reg.Register(m.collector(s)); err != nil {
		return err
	}
	fams, err := reg.Gather()
	if err != nil {
		return err
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			return err
		}
	}
	return nil
}

// collector returns a prometheus.Collector of m's metrics and the gauges
// of s. It is made for one scrape: the gauges are read from the node
// (its lag with I/O bounded by the scrape's context) before gathering,
// which Collect, taking no context, could not do.
func (m *Metrics) collector(s Snapshot) prometheus.Collector {
	return &scrape{m: m, s: s}
}

type scrape struct {
	m *Metrics
	s Snapshot
}

func (c *scrape) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.m.descs.all() {
		ch <- d
	}
}

func (c *scrape) Collect(ch chan<- prometheus.Metric) {
	m, s, d := c.m, c.s, &c.m.descs
	st := s.Status
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}

	gauge(d.nodeInfo, 1, st.Service, st.Node, string(st.JoinState))
	gauge(d.nodeReady, b2f(s.Ready))
	gauge(d.nodeStart, unixSeconds(st.StartedAt))

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
	for n, v := range held {
		gauge(d.held, float64(v), n)
	}
	for _, ss := range members {
		if v, ok := ss.Counters[runtime.CounterAssigned]; ok {
			gauge(d.assigned, float64(v), ss.Name)
		}
		gauge(d.paused, float64(len(ss.Paused)), ss.Name)
		gauge(d.operatorPaused, float64(len(ss.OperatorPaused)), ss.Name)
		gauge(d.parked, float64(ss.Parked), ss.Name)
		gauge(d.up, b2f(ss.State == runtime.StateRunning), ss.Name, string(ss.State))
	}
	for n, v := range s.Lag {
		gauge(d.lag, float64(v), n)
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
	for _, n := range subNames {
		sm := m.sub(n)
		leases := sm.leaseCounts(nil)
		for g, ms := range s.Groups {
			if gs, ok := m.subs.Load(g); ok && slices.Contains(ms, n) {
				leases = gs.(*subMetrics).leaseCounts(leases)
			}
		}
		counter(d.processed, sm.processed.Load(), n)
		for c := range sm.failed {
			counter(d.failed, sm.failed[c].Load(), n, runtime.FailureClass(c).String())
		}
		counter(d.parkedTotal, sm.parked.Load(), n)
		counter(d.resolved, sm.resolved.Load(), n)
		for k, v := range leases {
			counter(d.leaseEvents, v, n, string(k))
		}
		ch <- sm.handler.metric(d.handler, n)
	}
	ch <- m.renew.metric(d.renew)
	counter(d.renewFailures, m.renewFailures.Load())
	m.replicaWaits.Range(func(k, v any) bool {
		op, r := k.(string), v.(*replicaOp)
		for i, res := range replicaResults {
			counter(d.replicaWaits, r.results[i].Load(), op, res)
		}
		ch <- r.duration.metric(d.replicaWait, op)
		return true
	})
	if f := m.execQueue.Load(); f != nil {
		q := (*f)()
		gauge(d.execSlots, float64(q.Slots))
		gauge(d.execRunning, float64(q.Running))
		gauge(d.execDepth, float64(q.Waiting))
		ch <- m.execWait.metric(d.execWait)
	}
}

// descs describes every protctl_* family of a node. Names, help and
// labels are what dashboards and alerts are written against: change
// none without a line in CHANGELOG.md (TestNodeAdminMetricFamiliesStable
// holds them).
type descs struct {
	nodeInfo, nodeReady, nodeStart                                 *prometheus.Desc
	held, assigned, paused, parked, up, lag                        *prometheus.Desc
	operatorPaused                                                 *prometheus.Desc
	processed, failed, parkedTotal, resolved, leaseEvents, handler *prometheus.Desc
	renew, renewFailures, replicaWaits, replicaWait                *prometheus.Desc
	execSlots, execRunning, execDepth, execWait                    *prometheus.Desc
}

func newDescs() descs {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	sub := "subscription"
	return descs{
		nodeInfo:  desc("protctl_node_info", "The node's identity; the value is always 1.", "service", "node", "join_state"),
		nodeReady: desc("protctl_node_ready", "1 when the node has joined its service (the /readyz answer), else 0."),
		nodeStart: desc("protctl_node_start_time_seconds", "When the node started, in seconds since the Unix epoch."),

		held:           desc("protctl_partitions_held", "Partitions whose lease this node holds, by subscription.", sub),
		assigned:       desc("protctl_partitions_assigned", "Partitions rendezvous hashing gives this node (held or idle), by subscription.", sub),
		paused:         desc("protctl_partitions_paused", "Partitions paused by a systemic failure, by subscription.", sub),
		operatorPaused: desc("protctl_partitions_operator_paused", "Partitions held by an operator's pause (protctl pause), by subscription: their lag keeps growing on purpose.", sub),
		parked:         desc("protctl_parked", "Aggregates (Redis: partition keys) of this node's partitions parked in the failure ledger, by subscription.", sub),
		up:             desc("protctl_subscription_up", "1 while the subscription handles messages (state running), else 0; state is new, joining, unavailable, running, stopping, stopped or failed.", sub, "state"),
		lag:            desc("protctl_lag", "Entries (Redis) or offsets (Kafka) not yet handled on the partitions this node is given, by subscription.", sub),

		processed:   desc("protctl_messages_processed_total", "Handler calls that succeeded, by subscription.", sub),
		failed:      desc("protctl_messages_failed_total", "Handler calls that failed, by subscription and failure class (aggregate, systemic, fatal).", sub, "class"),
		parkedTotal: desc("protctl_parked_total", "Aggregates (Redis: partition keys) this node parked after their retries ran out, by subscription.", sub),
		resolved:    desc("protctl_resolved_total", "Parked entries this node resolved after an operator's retry or skip, by subscription.", sub),
		leaseEvents: desc("protctl_lease_events_total", "Lease changes (acquired, released, lost, untrusted, contested), by subscription.", sub, "event"),
		handler:     desc("protctl_handler_duration_seconds", "Time spent in the handler per call, by subscription.", sub),

		renew:         desc("protctl_lease_renew_duration_seconds", "Latency of lease renewal calls (one round trip renews a batch of leases)."),
		renewFailures: desc("protctl_lease_renew_failures_total", "Lease renewal calls that failed (the store could not be reached)."),
		replicaWaits: desc("protctl_replica_waits_total", "WAITs for replica acknowledgements after lease writes (lease.waitReplicas), by op (acquire, renew) and result (acked; short: fewer replicas within lease.waitTimeout, the write failed; error: the WAIT failed).",
			"op", "result"),
		replicaWait: desc("protctl_replica_wait_duration_seconds", "Time each WAIT for replica acknowledgements took, by op.", "op"),

		execSlots:   desc("protctl_exec_slots", "The bound of exec handler commands running at once on this node (handlers.execConcurrency)."),
		execRunning: desc("protctl_exec_running", "Exec handler commands running now."),
		execDepth:   desc("protctl_exec_queue_depth", "Exec handler calls waiting for a slot now."),
		execWait:    desc("protctl_exec_queue_wait_seconds", "Time each exec handler call waited for a slot before its command started (0 when one was free; not part of exec.timeout)."),
	}
}

func (d *descs) all() []*prometheus.Desc {
	return []*prometheus.Desc{
		d.nodeInfo, d.nodeReady, d.nodeStart,
		d.held, d.assigned, d.paused, d.operatorPaused, d.parked, d.up, d.lag,
		d.processed, d.failed, d.parkedTotal, d.resolved, d.leaseEvents, d.handler,
		d.renew, d.renewFailures, d.replicaWaits, d.replicaWait,
		d.execSlots, d.execRunning, d.execDepth, d.execWait,
	}
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

// metric is h now as a constant histogram of desc with labels.
// client_golang wants cumulative counts by upper bound; the +Inf bucket
// is the count.
func (h *histogram) metric(desc *prometheus.Desc, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.bounds))
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i].Load()
		buckets[b] = cum
	}
	cum += h.counts[len(h.bounds)].Load()
	return prometheus.MustNewConstHistogram(desc, cum, math.Float64frombits(h.sumBits.Load()), buckets, labels...)
}
