// Package admin serves a node's admin HTTP endpoint:
//
//	/healthz     200 while the process works (503 once every subscription failed)
//	/readyz      200 once the node has joined its service, 503 before and while leaving
//	/metrics     Prometheus metrics (Metrics, and the Go and process collectors)
//	/v1/status   the node's status as JSON (apiVersion protctl.dev/v1, kind NodeStatus)
//
// It listens on loopback by default. Bound to any other address it refuses
// to start without a bearer token, and with a token every request must
// carry "Authorization: Bearer <token>" (on loopback too), except the two
// probes when PublicProbes is set.
package admin

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// Node is what the endpoint reports on. *runtime.Node implements it.
type Node interface {
	Status() runtime.NodeStatus
	JoinState() runtime.JoinState
	Subscriptions() []runtime.Subscription
}

// joiner is a subscription that joins on its own after the node has
// (Kafka topic subscriptions): the node is ready once they have joined.
type joiner interface {
	JoinState() runtime.JoinState
}

// Config configures New.
type Config struct {
	// Listen is host:port; port 0 picks a free port (see Addr). Default:
	// 127.0.0.1:7070.
	Listen string
	// Listener, when set, is served instead of listening on Listen: get
	// it from Listen (the function), which applies the same rules, when
	// the bound address must be known before the server can be built.
	Listener net.Listener
	// Token is the bearer token; "" for none, which only a loopback
	// Listen allows.
	Token string
	// PublicProbes serves /healthz and /readyz without the token.
	PublicProbes bool
	// Node is reported on. Required.
	Node Node
	// Metrics are written at /metrics. Default: empty metrics (gauges
	// only).
	Metrics *Metrics
	// Lag, when set, is called at each /metrics scrape (bounded by
	// LagTimeout) for the protctl_lag gauge, by subscription as
	// configured. A subscription whose lag cannot be read must be left
	// out of the map (never 0); the error, logged, does not discard the
	// lags that were read.
	Lag func(ctx context.Context) (map[string]int64, error)
	// LagTimeout bounds Lag. Default: 2s.
	LagTimeout time.Duration
	// Logger receives the server's errors. Default: discard.
	Logger *slog.Logger
}

// ErrTokenRequired is returned by New and Start for a non-loopback
// address without a token.
var ErrTokenRequired = errors.New("admin: a bearer token is required when the admin endpoint listens on a non-loopback address")

// Server is the admin endpoint. New does no I/O; Start listens; Shutdown
// stops it.
type Server struct {
	cfg Config
	ln  net.Listener
	srv *http.Server
	// process is this node's registry of the Go runtime's and the
	// process's collectors: one per server, never the global default
	// registry, so that two nodes in one process (tests, the demo) do
	// not share or collide.
	process *prometheus.Registry
}

// New validates cfg and returns a server.
func New(cfg Config) (*Server, error) {
	if cfg.Node == nil {
		return nil, errors.New("admin: Node is required")
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:7070"
	}
	if cfg.Listener != nil {
		cfg.Listen = cfg.Listener.Addr().String()
	}
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("admin: listen address %q: %w", cfg.Listen, err)
	}
	if !IsLoopback(host) && cfg.Token == "" {
		return nil, fmt.Errorf("%w (listen %s)", ErrTokenRequired, cfg.Listen)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.LagTimeout <= 0 {
		cfg.LagTimeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	process := prometheus.NewRegistry()
	process.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Server{cfg: cfg, process: process}, nil
}

// IsLoopback reports whether host (an IP or a name) only ever means this
// machine: a loopback IP or "localhost". An empty host (every interface)
// and any other name are not.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Listen binds addr for a server, refusing (ErrTokenRequired) a
// non-loopback address when token is empty.
func Listen(addr, token string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("admin: listen address %q: %w", addr, err)
	}
	if !IsLoopback(host) && token == "" {
		return nil, fmt.Errorf("%w (listen %s)", ErrTokenRequired, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin: listen on %s: %w", addr, err)
	}
	// "localhost" may resolve to something else on a strange host: check
	// what was actually bound.
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() && token == "" {
		_ = ln.Close()
		return nil, fmt.Errorf("%w (bound %s)", ErrTokenRequired, tcp)
	}
	return ln, nil
}

// Start listens (unless Config.Listener was given) and serves in the
// background until Shutdown.
func (s *Server) Start() error {
	ln := s.cfg.Listener
	if ln == nil {
		var err error
		if ln, err = Listen(s.cfg.Listen, s.cfg.Token); err != nil {
			return err
		}
	}
	s.ln = ln
	s.srv = &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelDebug),
	}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.cfg.Logger.Error("admin endpoint stopped", "err", err)
		}
	}()
	return nil
}

// Addr is the address listened on (with the port picked for port 0); ""
// before Start.
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Shutdown stops the server, waiting for requests in progress up to ctx.
// A no-op before Start.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	return s.srv.Shutdown(ctx)
}

// Handler is the endpoint's handler, token check included.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", s.healthz)
	mux.HandleFunc("/readyz", s.readyz)
	mux.HandleFunc("/metrics", s.metrics)
	mux.HandleFunc("/v1/status", s.status)
	mux.HandleFunc("/{$}", s.index)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		probe := r.URL.Path == "/healthz" || r.URL.Path == "/readyz"
		if s.cfg.Token != "" && !(probe && s.cfg.PublicProbes) && !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="protctl"`)
			http.Error(w, "unauthorized: a bearer token is required", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		mux.ServeHTTP(w, r)
	})
}

func (s *Server) authorized(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.Token)) == 1
}

func (s *Server) index(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, "protctl node admin endpoint: /healthz /readyz /metrics /v1/status\n")
}

// Ready reports whether the node has joined its service, and every
// subscription that joins on its own has too; why says what is awaited.
func (s *Server) Ready() (ready bool, why string) {
	n := s.cfg.Node
	if st := n.JoinState(); st != runtime.JoinJoined {
		return false, "node " + string(st)
	}
	for _, sub := range n.Subscriptions() {
		if j, ok := sub.(joiner); ok {
			if st := j.JoinState(); st != runtime.JoinJoined {
				return false, sub.Name() + " " + string(st)
			}
		}
	}
	return true, "joined"
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if st := s.cfg.Node.Status().JoinState; st == runtime.JoinFailed {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "failed: every subscription stopped on a fatal error")
		return
	}
	fmt.Fprintln(w, "ok")
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	ready, why := s.Ready()
	if !ready {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "not ready: "+why)
		return
	}
	fmt.Fprintln(w, "ready")
}

// memberer is a subscription that runs several configured subscriptions
// under one name (a Kafka topic's: *topic.Consumer).
type memberer interface {
	Members() []runtime.SubscriptionStatus
}

// storeHealth is a node that knows whether its store (Redis) answers
// (*runtime.Node).
type storeHealth interface {
	StoreErr() error
}

func (s *Server) snapshot(ctx context.Context) Snapshot {
	n := s.cfg.Node
	snap := Snapshot{Status: n.Status()}
	snap.Ready, _ = s.Ready()
	var storeErr error
	if h, ok := n.(storeHealth); ok {
		storeErr = h.StoreErr()
	}
	for _, sub := range n.Subscriptions() {
		st := sub.Status()
		st.State = reportedState(st.State, storeErr)
		snap.Subscriptions = append(snap.Subscriptions, st)
		ms := []runtime.SubscriptionStatus{st}
		if m, ok := sub.(memberer); ok {
			ms = m.Members()
			if snap.Groups == nil {
				snap.Groups = map[string][]string{}
			}
			for i := range ms {
				ms[i].State = reportedState(ms[i].State, storeErr)
				snap.Groups[st.Name] = append(snap.Groups[st.Name], ms[i].Name)
			}
		}
		snap.Members = append(snap.Members, ms...)
	}
	if s.cfg.Lag != nil {
		lctx, cancel := context.WithTimeout(ctx, s.cfg.LagTimeout)
		lag, err := s.cfg.Lag(lctx)
		cancel()
		if err != nil {
			s.cfg.Logger.Debug("admin: reading the lag failed", "err", err)
		}
		// What could be read is reported; the rest is left out.
		snap.Lag = lag
	}
	return snap
}

// reportedState is st, except that a subscription that would be running
// (or joining) is unavailable while the node's store cannot be reached:
// it cannot renew, read or acknowledge anything then.
func reportedState(st runtime.SubscriptionState, storeErr error) runtime.SubscriptionState {
	if storeErr != nil && (st == runtime.StateRunning || st == runtime.StateJoining) {
		return runtime.StateUnavailable
	}
	return st
}

// metrics serves a scrape: the process registry's collectors and the
// node's metrics over a snapshot taken now, with the request's context
// bounding the lag read. A metric that cannot be gathered is logged and
// left out; the rest is served.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	node := prometheus.NewRegistry()
	if err := node.Register(s.cfg.Metrics.collector(s.snapshot(r.Context()))); err != nil {
		s.cfg.Logger.Debug("admin: registering the node's metrics failed", "err", err)
	}
	promhttp.HandlerFor(prometheus.Gatherers{s.process, node}, promhttp.HandlerOpts{
		ErrorLog:      promLogger{s.cfg.Logger},
		ErrorHandling: promhttp.ContinueOnError,
	}).ServeHTTP(w, r)
}

// promLogger logs promhttp's errors (a metric that could not be
// gathered or written) at debug level, as the endpoint's other errors.
type promLogger struct{ l *slog.Logger }

func (p promLogger) Println(v ...any) { p.l.Debug("admin: serving metrics", "err", fmt.Sprint(v...)) }

// StatusJSON is the /v1/status document: the node's status record (what
// `protctl nodes ls` reads from Redis) plus readiness and the
// subscriptions' detail, each under its configured name (the `name:` of
// the node config). Times are RFC 3339 UTC.
type StatusJSON struct {
	APIVersion string                  `json:"apiVersion"`
	Kind       string                  `json:"kind"`
	Service    string                  `json:"service"`
	Node       string                  `json:"node"`
	AdminAddr  string                  `json:"adminAddr,omitempty"`
	JoinState  runtime.JoinState       `json:"joinState"`
	Ready      bool                    `json:"ready"`
	StartedAt  time.Time               `json:"startedAt"`
	Held       []runtime.HeldPartition `json:"held"`
	Paused     []string                `json:"paused"`
	// OperatorPaused are "subscription/partition" held by an operator's
	// pause (protctl pause), apart from Paused (backing off on its own).
	OperatorPaused []string           `json:"operatorPaused,omitempty"`
	Throttled      []string           `json:"throttled"`
	Parked         int                `json:"parked"`
	Counters       map[string]int64   `json:"counters"`
	Subscriptions  []SubscriptionJSON `json:"subscriptions"`
}

// SubscriptionJSON is one subscription in StatusJSON.
type SubscriptionJSON struct {
	Name   string                    `json:"name"`
	Source source.Kind               `json:"source"`
	State  runtime.SubscriptionState `json:"state"`
	Held   int                       `json:"held"`
	Paused []string                  `json:"paused"`
	// OperatorPaused: see StatusJSON.OperatorPaused.
	OperatorPaused []string         `json:"operatorPaused,omitempty"`
	Throttled      []string         `json:"throttled"`
	Parked         int              `json:"parked"`
	Counters       map[string]int64 `json:"counters"`
	Error          *string          `json:"error"`
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	snap := s.snapshot(r.Context())
	st := snap.Status
	doc := StatusJSON{
		APIVersion: "protctl.dev/v1", Kind: "NodeStatus",
		Service: st.Service, Node: st.Node, AdminAddr: st.AdminAddr, JoinState: st.JoinState, Ready: snap.Ready,
		StartedAt: st.StartedAt.UTC(), Held: nonNil(st.Held), Paused: nonNil(st.Paused), Throttled: nonNil(st.Throttled),
		OperatorPaused: st.OperatorPaused, Parked: st.Parked, Counters: st.Counters, Subscriptions: []SubscriptionJSON{},
	}
	if doc.Counters == nil {
		doc.Counters = map[string]int64{}
	}
	// The subscriptions as configured (a Kafka topic's one by one, never
	// under the node's internal "topic:<topic>"), as every metric is
	// labelled.
	subs := snap.Members
	if subs == nil {
		subs = snap.Subscriptions
	}
	for _, ss := range subs {
		sj := SubscriptionJSON{
			Name: ss.Name, Source: ss.Source, State: ss.State, Held: len(ss.Held),
			Paused: nonNil(ss.Paused), Throttled: nonNil(ss.Throttled), Parked: ss.Parked, Counters: ss.Counters,
			OperatorPaused: ss.OperatorPaused,
		}
		if sj.Counters == nil {
			sj.Counters = map[string]int64{}
		}
		if ss.Err != nil {
			msg := ss.Err.Error()
			sj.Error = &msg
		}
		doc.Subscriptions = append(doc.Subscriptions, sj)
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(doc)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
