package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/protctl/protctl/internal/admin"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/memstore"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// fakeNode is a Node whose state the test sets.
type fakeNode struct {
	mu   sync.Mutex
	join runtime.JoinState
	subs []runtime.Subscription
	st   runtime.NodeStatus
}

func (n *fakeNode) Status() runtime.NodeStatus {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.st
	st.JoinState = n.join
	return st
}

func (n *fakeNode) JoinState() runtime.JoinState {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.join
}

func (n *fakeNode) Subscriptions() []runtime.Subscription { return n.subs }

func (n *fakeNode) set(j runtime.JoinState) {
	n.mu.Lock()
	n.join = j
	n.mu.Unlock()
}

// fakeSub is a subscription with a fixed status and, optionally, a join
// state of its own (as Kafka topic subscriptions have).
type fakeSub struct {
	st   runtime.SubscriptionStatus
	join *runtime.JoinState
}

func (s *fakeSub) Name() string                              { return s.st.Name }
func (s *fakeSub) Start(context.Context, runtime.Host) error { return nil }
func (s *fakeSub) Stop(context.Context) error                { return nil }
func (s *fakeSub) Status() runtime.SubscriptionStatus        { return s.st }
func (j *joiningSub) JoinState() runtime.JoinState           { return *j.join }
func newServer(t *testing.T, cfg admin.Config) (*admin.Server, string) {
	t.Helper()
	s, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s, "http://" + s.Addr()
}

type joiningSub struct{ fakeSub }

func get(t *testing.T, url, token string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header
}

func TestNodeAdminMetricsParseAndCount(t *testing.T) {
	m := admin.NewMetrics()
	obs := m.Observer(nil)
	weird := "sub\"with\\odd\nname"
	for i := range 5 {
		obs.OnHandled(runtime.HandledEvent{Subscription: "projector", Duration: time.Duration(i) * time.Millisecond})
	}
	obs.OnHandled(runtime.HandledEvent{Subscription: "projector", Err: errors.New("x"), Class: runtime.FailAggregate, Duration: 2 * time.Second})
	obs.OnHandled(runtime.HandledEvent{Subscription: "projector", Err: errors.New("x"), Class: runtime.FailSystemic, Duration: time.Millisecond})
	obs.OnHandled(runtime.HandledEvent{Subscription: weird, Duration: time.Millisecond})
	obs.OnParked(ledger.Parked{Subscription: "projector", Aggregate: "k1"})
	obs.OnLease(runtime.LeaseEvent{Subscription: "projector", Kind: runtime.LeaseAcquired})
	obs.OnLease(runtime.LeaseEvent{Subscription: "projector", Kind: runtime.LeaseAcquired})
	obs.OnLease(runtime.LeaseEvent{Subscription: "projector", Kind: runtime.LeaseReleased})
	m.ObserveRenew(3*time.Millisecond, nil)
	m.ObserveRenew(30*time.Millisecond, errors.New("down"))

	node := &fakeNode{join: runtime.JoinJoined, st: runtime.NodeStatus{Service: "shop", Node: "n1", StartedAt: time.Unix(1700000000, 0)}}
	node.subs = []runtime.Subscription{&fakeSub{st: runtime.SubscriptionStatus{
		Name: "projector", Source: source.Redis, State: runtime.StateRunning,
		Held:     []runtime.HeldPartition{{Subscription: "projector", Partition: "k1"}, {Subscription: "projector", Partition: "k2"}},
		Paused:   []string{"k2"},
		Parked:   1,
		Counters: map[string]int64{runtime.CounterAssigned: 7},
	}}}
	_, base := newServer(t, admin.Config{Listen: "127.0.0.1:0", Node: node, Metrics: m,
		Lag: func(context.Context) (map[string]int64, error) { return map[string]int64{"projector": 42}, nil }})

	code, body, hdr := get(t, base+"/metrics", "")
	if code != 200 || expfmt.ResponseFormat(hdr).FormatType() != expfmt.TypeTextPlain {
		t.Fatalf("/metrics: %d %s, want the text format", code, hdr.Get("Content-Type"))
	}
	fams := testenv.ParseScrape(t, body)
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		series := name
		if len(labels) > 0 {
			var pairs []string
			for k, v := range labels {
				pairs = append(pairs, fmt.Sprintf("%s=%q", k, v))
			}
			series += "{" + strings.Join(pairs, ",") + "}"
		}
		v, ok := testenv.ScrapeValue(fams, series)
		if !ok {
			t.Errorf("no sample %s in:\n%s", series, body)
			return math.NaN()
		}
		return v
	}
	p := map[string]string{"subscription": "projector"}
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"protctl_partitions_held", p, 2},
		{"protctl_partitions_assigned", p, 7},
		{"protctl_partitions_paused", p, 1},
		{"protctl_parked", p, 1},
		{"protctl_lag", p, 42},
		{"protctl_node_ready", nil, 1},
		{"protctl_messages_processed_total", p, 5},
		{"protctl_messages_failed_total", map[string]string{"subscription": "projector", "class": "aggregate"}, 1},
		{"protctl_messages_failed_total", map[string]string{"subscription": "projector", "class": "systemic"}, 1},
		{"protctl_parked_total", p, 1},
		{"protctl_lease_events_total", map[string]string{"subscription": "projector", "event": "acquired"}, 2},
		{"protctl_handler_duration_seconds_count", p, 7},
		{"protctl_handler_duration_seconds_bucket", map[string]string{"subscription": "projector", "le": "0.001"}, 3}, // 0ms, 1ms and the systemic failure's 1ms
		{"protctl_handler_duration_seconds_bucket", map[string]string{"subscription": "projector", "le": "1"}, 6},
		{"protctl_lease_renew_duration_seconds_count", nil, 2},
		{"protctl_lease_renew_failures_total", nil, 1},
		{"protctl_messages_processed_total", map[string]string{"subscription": weird}, 1},
	}
	for _, c := range checks {
		if got := value(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for name, typ := range map[string]string{
		"protctl_handler_duration_seconds": "histogram", "protctl_lease_renew_duration_seconds": "histogram",
		"protctl_messages_processed_total": "counter", "protctl_partitions_held": "gauge", "protctl_lag": "gauge",
	} {
		if f := fams[name]; f == nil || strings.ToLower(f.GetType().String()) != typ || f.GetHelp() == "" {
			t.Errorf("family %s: %+v, want type %s with help", name, f, typ)
		}
	}
}

// /readyz answers 503 until the node has joined (its first heartbeat), and
// until subscriptions that join on their own (Kafka) have joined too.
func TestNodeAdminReadyzUntilJoined(t *testing.T) {
	node := &fakeNode{join: runtime.JoinJoining}
	joinState := runtime.JoinJoining
	node.subs = []runtime.Subscription{&joiningSub{fakeSub{st: runtime.SubscriptionStatus{Name: "topic:orders"}, join: &joinState}}}
	_, base := newServer(t, admin.Config{Listen: "127.0.0.1:0", Node: node})
	if code, body, _ := get(t, base+"/readyz", ""); code != 503 || !strings.Contains(body, "node joining") {
		t.Errorf("joining node: %d %q", code, body)
	}
	node.set(runtime.JoinJoined)
	if code, body, _ := get(t, base+"/readyz", ""); code != 503 || !strings.Contains(body, "topic:orders joining") {
		t.Errorf("joined node, joining topic: %d %q", code, body)
	}
	joinState = runtime.JoinJoined
	if code, _, _ := get(t, base+"/readyz", ""); code != 200 {
		t.Errorf("joined: %d", code)
	}
	node.set(runtime.JoinLeaving)
	if code, _, _ := get(t, base+"/readyz", ""); code != 503 {
		t.Errorf("leaving: %d", code)
	}
	if code, _, _ := get(t, base+"/healthz", ""); code != 200 {
		t.Errorf("healthz while leaving: %d", code)
	}
}

// The same with a real runtime.Node: it joins at its first heartbeat.
func TestNodeAdminReadyzRealNode(t *testing.T) {
	b := memorybroker.New()
	store := memstore.New(b.Faults())
	sub, err := partitioned.New(partitioned.Config{
		Name: "projector", Categories: []string{"shop::order"}, Broker: b, Ledger: store,
		Handler: runtime.HandlerFunc(func(context.Context, runtime.Message) error { return nil }),
	})
	if err != nil {
		t.Fatal(err)
	}
	node, err := runtime.NewNode(runtime.NodeConfig{Service: "shop", NodeID: "n1", Membership: store, HeartbeatEvery: 50 * time.Millisecond}, sub)
	if err != nil {
		t.Fatal(err)
	}
	_, base := newServer(t, admin.Config{Listen: "127.0.0.1:0", Node: node})
	if code, _, _ := get(t, base+"/readyz", ""); code != 503 {
		t.Fatalf("before start: %d, want 503", code)
	}
	if err := node.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer node.Stop(context.Background())
	testenv.Eventually(t, 10*time.Second, "/readyz to answer 200", func() (bool, string) {
		code, _, _ := get(t, base+"/readyz", "")
		return code == 200, fmt.Sprintf("/readyz %d", code)
	})
	code, body, _ := get(t, base+"/v1/status", "")
	var st admin.StatusJSON
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil {
		t.Fatalf("/v1/status: %d %s", code, body)
	}
	if st.APIVersion != "protctl.dev/v1" || st.Kind != "NodeStatus" || st.Node != "n1" || !st.Ready || st.JoinState != runtime.JoinJoined ||
		len(st.Subscriptions) != 1 || st.Subscriptions[0].Name != "projector" || st.StartedAt.Location() != time.UTC {
		t.Errorf("status: %+v", st)
	}
	fams := testenv.ParseScrape(t, mustGet(t, base+"/metrics"))
	for _, series := range []string{`protctl_subscription_up{subscription="projector",state="running"}`, "go_goroutines", "process_start_time_seconds"} {
		if _, ok := testenv.ScrapeValue(fams, series); !ok {
			t.Errorf("metrics of a real node lack %s", series)
		}
	}
}

func mustGet(t *testing.T, url string) string {
	t.Helper()
	_, body, _ := get(t, url, "")
	return body
}

func TestNodeAdminTokenRequiredOffLoopback(t *testing.T) {
	node := &fakeNode{join: runtime.JoinJoined}
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0", "10.1.2.3:7070"} {
		if _, err := admin.New(admin.Config{Listen: listen, Node: node}); !errors.Is(err, admin.ErrTokenRequired) {
			t.Errorf("listen %s without a token: %v, want ErrTokenRequired", listen, err)
		}
	}

	// Bound to every interface with a token: every request needs it.
	s, _ := newServer(t, admin.Config{Listen: "0.0.0.0:0", Token: "s3cret", Node: node})
	base := "http://127.0.0.1:" + s.Addr()[strings.LastIndex(s.Addr(), ":")+1:]
	for _, path := range []string{"/metrics", "/v1/status", "/healthz", "/readyz"} {
		code, _, hdr := get(t, base+path, "")
		if code != http.StatusUnauthorized || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s without a token: %d", path, code)
		}
		if code, _, _ := get(t, base+path, "wrong"); code != http.StatusUnauthorized {
			t.Errorf("%s with a wrong token: %d", path, code)
		}
		if code, _, _ := get(t, base+path, "s3cret"); code != http.StatusOK {
			t.Errorf("%s with the token: %d", path, code)
		}
	}

	// PublicProbes opens the probes only.
	s, _ = newServer(t, admin.Config{Listen: "0.0.0.0:0", Token: "s3cret", PublicProbes: true, Node: node})
	base = "http://127.0.0.1:" + s.Addr()[strings.LastIndex(s.Addr(), ":")+1:]
	if code, _, _ := get(t, base+"/readyz", ""); code != 200 {
		t.Errorf("public /readyz: %d", code)
	}
	if code, _, _ := get(t, base+"/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("/metrics with public probes: %d", code)
	}

	// Loopback needs no token.
	_, base = newServer(t, admin.Config{Listen: "127.0.0.1:0", Node: node})
	if code, _, _ := get(t, base+"/metrics", ""); code != 200 {
		t.Errorf("loopback without a token: %d", code)
	}
}

func TestNodeAdminMethodsAndUnknownPaths(t *testing.T) {
	s, err := admin.New(admin.Config{Node: &fakeNode{join: runtime.JoinJoined}})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/metrics", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", rec.Code)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/nope", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("unknown path: %d", rec.Code)
	}
}

// storeNode is a fakeNode whose store (Redis) fails, as runtime.Node's
// StoreErr reports it.
type storeNode struct {
	*fakeNode
	err error // under fakeNode.mu
}

func (n *storeNode) StoreErr() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

// topicSubs is a subscription running several configured ones under one
// name, as topic.Consumer does.
type topicSubs struct {
	fakeSub
	members []runtime.SubscriptionStatus
}

func (s *topicSubs) Members() []runtime.SubscriptionStatus { return s.members }

// Every per-subscription metric is labelled with the configured names (a
// topic's subscriptions one by one, its lease events under each), a lag
// that could not be read is absent while the ones read stay, and a store
// that fails makes running subscriptions unavailable (up 0) in /metrics
// and /v1/status alike.
func TestNodeAdminMetricsLabelsStatesAndUnknownLag(t *testing.T) {
	m := admin.NewMetrics()
	obs := m.Observer(nil)
	obs.OnLease(runtime.LeaseEvent{Subscription: "topic:orders", Kind: runtime.LeaseAcquired})
	obs.OnHandled(runtime.HandledEvent{Subscription: "ledger-sync"})
	fn := &fakeNode{join: runtime.JoinJoined, st: runtime.NodeStatus{Service: "shop", Node: "n1"}}
	fn.subs = []runtime.Subscription{
		&fakeSub{st: runtime.SubscriptionStatus{Name: "projector", Source: source.Redis, State: runtime.StateRunning}},
		&topicSubs{fakeSub: fakeSub{st: runtime.SubscriptionStatus{Name: "topic:orders", Source: source.Kafka, State: runtime.StateUnavailable}},
			members: []runtime.SubscriptionStatus{
				{Name: "ledger-sync", Source: source.Kafka, State: runtime.StateUnavailable, Parked: 2},
				{Name: "fraud", Source: source.Kafka, State: runtime.StateFailed},
			}},
	}
	node := &storeNode{fakeNode: fn}
	_, base := newServer(t, admin.Config{Listen: "127.0.0.1:0", Node: node, Metrics: m,
		Lag: func(context.Context) (map[string]int64, error) {
			return map[string]int64{"projector": 5}, errors.New("topic orders: joining")
		}})

	_, body, _ := get(t, base+"/metrics", "")
	fams := testenv.ParseScrape(t, body)
	for series, want := range map[string]float64{
		`protctl_subscription_up{subscription="projector",state="running"}`:       1,
		`protctl_subscription_up{subscription="ledger-sync",state="unavailable"}`: 0,
		`protctl_subscription_up{subscription="fraud",state="failed"}`:            0,
		`protctl_parked{subscription="ledger-sync"}`:                              2,
		`protctl_lag{subscription="projector"}`:                                   5,
		`protctl_lease_events_total{subscription="ledger-sync",event="acquired"}`: 1,
		`protctl_lease_events_total{subscription="fraud",event="acquired"}`:       1,
		`protctl_messages_processed_total{subscription="ledger-sync"}`:            1,
	} {
		if v, ok := testenv.ScrapeValue(fams, series); !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}
	for _, bad := range []string{`protctl_lag{subscription="ledger-sync"}`, `protctl_lag{subscription="fraud"}`} {
		if _, ok := testenv.ScrapeValue(fams, bad); ok {
			t.Errorf("metrics have %s:\n%s", bad, body)
		}
	}
	if strings.Contains(body, `subscription="topic:orders"`) {
		t.Errorf("metrics labelled with the internal topic:orders:\n%s", body)
	}

	node.mu.Lock()
	node.err = errors.New("dial tcp: connection refused")
	node.mu.Unlock()
	_, body, _ = get(t, base+"/metrics", "")
	fams = testenv.ParseScrape(t, body)
	if v, ok := testenv.ScrapeValue(fams, `protctl_subscription_up{subscription="projector",state="unavailable"}`); !ok || v != 0 {
		t.Errorf("Redis down: projector not unavailable 0 (%v %v):\n%s", v, ok, body)
	}
	if v, ok := testenv.ScrapeValue(fams, `protctl_subscription_up{subscription="fraud",state="failed"}`); !ok || v != 0 {
		t.Errorf("Redis down: a failed subscription is still failed, got %v %v", v, ok)
	}
	_, status, _ := get(t, base+"/v1/status", "")
	if strings.Contains(status, `"state": "running"`) || !strings.Contains(status, `"state": "unavailable"`) {
		t.Errorf("Redis down: /v1/status:\n%s", status)
	}
}
