//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// startRunNode runs runNode in the test process until the returned stop
// is called; it returns the admin address once the node has started.
func startRunNode(t *testing.T, config string) (addr string, stop func() error) {
	t.Helper()
	var logs procOutput
	return startRunNodeOpts(t, &runNodeOptions{
		Out: io.Discard, ErrOut: &logs, Getenv: func(string) string { return "" },
		ConfigPath: config, LogFormat: "text", LogLevel: slog.LevelDebug,
	}, &logs)
}

// startRunNodeOpts runs runNode in-process with opts (its Ready is set
// here) until stop is called or the test ends, and returns the admin
// address ("http://host:port") once the node has started; logs, which
// opts writes the node's logs to, is shown when the test fails.
func startRunNodeOpts(t *testing.T, opts *runNodeOptions, logs fmt.Stringer) (addr string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	opts.Ready = func(a string) { ready <- a }
	go func() { done <- runNode(ctx, opts) }()
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("run node: %v\n%s", err, logs.String())
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("run node did not start within 30s")
	}
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("run node did not return within 30s of the signal")
			return nil
		}
	}
	t.Cleanup(func() {
		_ = stop()
		if t.Failed() {
			t.Logf("node logs:\n%s", logs.String())
		}
	})
	return "http://" + addr, stop
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metricValue finds one series' value in a scrape (parsed with
// expfmt: testenv.ScrapeValue), its labels in any order.
func metricValue(t *testing.T, text, series string) (float64, bool) {
	t.Helper()
	return testenv.ScrapeValue(testenv.ParseScrape(t, text), series)
}

// The admin endpoint of a running node: ready once joined, metrics with
// the partitions held, the lag behind a slow handler and the handler
// latency, the status document; the drain on the signal leaves no lease.
func TestRunNodeAdminEndpoint(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	dir := t.TempDir()
	script := writeRecordScript(t, dir)
	record := filepath.Join(dir, "record.txt")
	// 10 events on one key, read 2 at a time by a handler that takes 1s:
	// while the first runs, 8 are not delivered yet.
	if err := <-publishEvents(t, c, keyNames(1), 10, 0); err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(nodeYAML(srv.URL(), "node-1", execHandlerYAML(script, record, "1"), 20*time.Second), "maxInFlight: 20", "maxInFlight: 2", 1)
	path := filepath.Join(dir, "node.yaml")
	writeFile(t, path, cfg)
	base, stop := startRunNode(t, path)

	testenv.Eventually(t, 30*time.Second, "/readyz 200", func() (bool, string) {
		code, _ := httpGet(t, base+"/readyz")
		return code == 200, fmt.Sprintf("/readyz %d", code)
	})
	var metrics string
	testenv.Eventually(t, 30*time.Second, "lag 8 and one partition held", func() (bool, string) {
		_, metrics = httpGet(t, base+"/metrics")
		lag, ok1 := metricValue(t, metrics, `protctl_lag{subscription="projector"}`)
		held, ok2 := metricValue(t, metrics, `protctl_partitions_held{subscription="projector"}`)
		return ok1 && ok2 && lag == 8 && held == 1, fmt.Sprintf("lag %v (present %v), held %v (present %v)", lag, ok1, held, ok2)
	})
	testenv.Eventually(t, 30*time.Second, "a handler call measured", func() (bool, string) {
		_, metrics = httpGet(t, base+"/metrics")
		n, ok := metricValue(t, metrics, `protctl_handler_duration_seconds_count{subscription="projector"}`)
		return ok && n >= 1, fmt.Sprintf("handler calls %v (present %v)", n, ok)
	})
	fams := testenv.ParseScrape(t, metrics)
	for name, typ := range map[string]dto.MetricType{
		"protctl_handler_duration_seconds": dto.MetricType_HISTOGRAM,
		// The node's exec slots (one key: nothing ever waits).
		"protctl_exec_queue_wait_seconds": dto.MetricType_HISTOGRAM,
		// The Go and process collectors.
		"go_goroutines": dto.MetricType_GAUGE, "process_start_time_seconds": dto.MetricType_GAUGE,
	} {
		if f := fams[name]; f == nil || f.GetType() != typ {
			t.Errorf("metrics lack the %s %s", typ, name)
		}
	}
	for _, want := range []string{
		`protctl_messages_processed_total{subscription="projector"}`,
		"protctl_lease_renew_duration_seconds_count",
		"protctl_exec_slots",
	} {
		if _, ok := testenv.ScrapeValue(fams, want); !ok {
			t.Errorf("metrics lack %s", want)
		}
	}
	for series, want := range map[string]float64{
		`protctl_node_info{service="shop",node="node-1",join_state="joined"}`: 1,
		"protctl_exec_queue_depth": 0,
	} {
		if v, ok := testenv.ScrapeValue(fams, series); !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}
	code, body := httpGet(t, base+"/v1/status")
	var st struct {
		Node      string `json:"node"`
		AdminAddr string `json:"adminAddr"`
		Ready     bool   `json:"ready"`
		Held      []struct {
			Partition string `json:"partition"`
		} `json:"held"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil || st.Node != "node-1" || !st.Ready || len(st.Held) != 1 ||
		"http://"+st.AdminAddr != base {
		t.Errorf("/v1/status %d: %s", code, body)
	}
	// The status record in Redis carries the bound admin address.
	members, err := redisstore.New(c).Members(context.Background(), procService)
	if err != nil || len(members) != 1 || "http://"+members[0].AdminAddr != base {
		t.Errorf("status record: %+v %v", members, err)
	}

	if err := stop(); err != nil {
		t.Fatalf("drain: %v", err)
	}
	if leases := heldLeases(t, c, "node-1"); len(leases) != 0 {
		t.Errorf("leases after the drain: %v", leases)
	}
}

// A Kafka topic subscription from the config: its partitions are leased in
// Redis, records reach the http handler in order per key, and the drain
// saves the checkpoints (the next offset of every partition). The reader
// fetches kafka.fetchMaxPartitionBytes per partition (seen by the broker).
//
// Each record is handled exactly once unless the node gave a lease up
// (its renewals failed for the whole trust window: on a loaded machine
// the renewer can be starved that long): it then takes the partition
// again under a new generation and reads it from its last checkpoint, so
// what it handled after that checkpoint is handled again, still in
// order; a lease given up just before the drain is neither saved nor
// released by it. The test then asserts those guarantees instead.
func TestRunNodeKafkaSubscription(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	kafka := testenv.StartKafka(t, 3, "orders")
	var fetchMu sync.Mutex
	partMaxBytes := map[int32]int{} // PartitionMaxBytes -> fetch requests
	kafka.Cluster.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		fetchMu.Lock()
		defer fetchMu.Unlock()
		for _, tp := range req.(*kmsg.FetchRequest).Topics {
			for _, p := range tp.Partitions {
				partMaxBytes[p.PartitionMaxBytes]++
			}
		}
		return nil, nil, false // observed, not handled: it stays and the broker answers
	})

	rec, hs := newSeqServer(t)

	dir := t.TempDir()
	path := filepath.Join(dir, "node.yaml")
	// A trust window of 9s: the test is not about lease expiry, and a
	// shorter one (it was 1.6s) is outlasted by a starved renewer on a
	// loaded CI runner several times in ten runs.
	writeFile(t, path, fmt.Sprintf(`service: shop
node: node-1
redis: {url: "%s"}
kafka: {brokers: ["%s"], fetchMaxPartitionBytes: 65536}
admin: {listen: "127.0.0.1:0"}
lease: {ttl: 10s, renewEvery: 1s}
subscriptions:
  - name: ledger-sync
    kafka: {topic: orders}
    handler:
      http: {url: "%s/events"}
`, srv.URL(), kafka.Brokers[0], hs.URL))
	var logs procOutput
	base, stop := startRunNodeOpts(t, &runNodeOptions{
		Out: io.Discard, ErrOut: &logs, Getenv: func(string) string { return "" },
		ConfigPath: path, LogFormat: "text", LogLevel: slog.LevelDebug,
	}, &logs)

	cl := kafka.Client(t)
	keys := []string{"a", "b", "c", "d", "e", "f"}
	records := seqRecords("orders", keys, 10)
	kafka.Produce(t, cl, records...)
	testenv.Eventually(t, time.Minute, "every record handled", func() (bool, string) { return rec.caughtUp(keys, 10) })
	testenv.Eventually(t, 30*time.Second, "/readyz 200 (topic joined)", func() (bool, string) {
		code, _ := httpGet(t, base+"/readyz")
		return code == 200, fmt.Sprintf("/readyz %d", code)
	})
	fetchMu.Lock()
	if len(partMaxBytes) != 1 || partMaxBytes[65536] == 0 {
		t.Errorf("fetch requests by partition max bytes: %v, want every one at 65536 (kafka.fetchMaxPartitionBytes)", partMaxBytes)
	}
	fetchMu.Unlock()
	// Every metric of the subscription carries its configured name, none
	// the node's internal topic:orders. The handler answers before the
	// node counts the call as processed, a Redis call slower than its
	// timeout shows the subscription unavailable until the next one
	// succeeds, and a lease given up is taken again a moment later: read
	// the metrics until the node has settled, then check that scrape.
	want := map[string]float64{
		`protctl_subscription_up{subscription="ledger-sync",state="running"}`: 1,
		`protctl_partitions_assigned{subscription="ledger-sync"}`:             3,
		`protctl_partitions_held{subscription="ledger-sync"}`:                 3,
		`protctl_partitions_backing_off{subscription="ledger-sync"}`:          0,
		`protctl_partitions_paused{subscription="ledger-sync"}`:               0,
		`protctl_parked{subscription="ledger-sync"}`:                          0,
	}
	const (
		processed = `protctl_messages_processed_total{subscription="ledger-sync"}`
		acquired  = `protctl_lease_events_total{subscription="ledger-sync",event="acquired"}`
		lag       = `protctl_lag{subscription="ledger-sync"}`
	)
	var metrics, logsThen string
	var mark int // the logs' length before the scrape
	testenv.Eventually(t, time.Minute, "the node's metrics to settle", func() (bool, string) {
		mark = len(logs.String())
		_, metrics = httpGet(t, base+"/metrics")
		logsThen = logs.String()
		for series, w := range want {
			if v, ok := metricValue(t, metrics, series); !ok || v != w {
				return false, fmt.Sprintf("%s = %v (present %v), want %v", series, v, ok, w)
			}
		}
		n, _ := metricValue(t, metrics, processed)
		a, _ := metricValue(t, metrics, acquired)
		_, hasLag := metricValue(t, metrics, lag)
		logged := strings.Count(logsThen, "partition acquired")
		return n >= float64(len(records)) && a == float64(logged) && hasLag,
			fmt.Sprintf("processed %v of %d, acquired %v (%d logged), lag present %v", n, len(records), a, logged, hasLag)
	})
	for series, w := range want {
		if v, ok := metricValue(t, metrics, series); !ok || v != w {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, w)
		}
	}
	if _, ok := metricValue(t, metrics, lag); !ok {
		t.Errorf("no lag for ledger-sync, whose partitions are held:\n%s", metrics)
	}
	if subs := subscriptionLabels(t, metrics); slices.ContainsFunc(subs, func(s string) bool { return strings.HasPrefix(s, "topic:") }) {
		t.Errorf("a metric labelled with the internal topic:<topic> name (%v):\n%s", subs, metrics)
	}
	// Each record once, unless a lease was given up (then at least once,
	// and at most once per call the handler answered).
	gaveUp := len(leasesGivenUp(logsThen))
	if n, ok := metricValue(t, metrics, processed); !ok || n < float64(len(records)) || n > float64(rec.total()) ||
		(gaveUp == 0 && n != float64(len(records))) {
		t.Errorf("%s = %v (present %v), want %d (at most the %d calls answered when %d leases were given up)", processed, n, ok, len(records), rec.total(), gaveUp)
	}
	// Each acquisition counted (the node logs each one); one per
	// partition in a run where nothing went wrong (no warning logged).
	logged := strings.Count(logsThen, "partition acquired")
	if a, ok := metricValue(t, metrics, acquired); !ok || a != float64(logged) || logged < 3 ||
		(logged != 3 && !strings.Contains(logsThen, "level=WARN")) {
		t.Errorf("%s = %v (present %v), want the %d acquisitions logged: 3, one per partition, unless a warning says why", acquired, a, ok, logged)
	}

	if err := stop(); err != nil {
		t.Fatalf("drain: %v", err)
	}
	all := logs.String()
	rec.wantInOrder(t, keys, 10, len(leasesGivenUp(all)))
	// A lease given up after the node settled may not have been taken
	// again when the drain began: its partition is neither saved nor
	// released by the drain (its lease expires in Redis).
	late := map[int32]bool{}
	for _, p := range leasesGivenUp(all[mark:]) {
		late[p] = true
	}
	group := redisstore.TopicLeaseGroup("shop", "orders")
	next, err := redisstore.New(c).LoadAll(context.Background(), group.String(), "ledger-sync")
	if err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 3; p++ {
		switch {
		case late[p]:
			t.Logf("partition %d: lease given up just before the drain; checkpoint %d", p, next[p])
			if next[p] > 20 {
				t.Errorf("partition %d checkpoint %d, past the partition's head 20", p, next[p])
			}
		case next[p] != 20:
			t.Errorf("partition %d checkpoint %d, want 20 (every record)", p, next[p])
		}
	}
	var leftover bytes.Buffer
	for p := int32(0); p < 3; p++ {
		v, err := c.Get(context.Background(), group.LeaseKey(p)).Result()
		if err == nil && (!late[p] || !strings.HasPrefix(v, "node-1:")) {
			fmt.Fprintf(&leftover, "%d=%s ", p, v)
		}
	}
	if leftover.Len() > 0 {
		t.Errorf("topic leases held after the drain: %s", leftover.String())
	}
}

// leasesGivenUp returns the partitions, one per lease, whose lease a
// node's logs (text or JSON) say it gave up on its own: refused at a
// renewal, or not renewed within the trust window. Each is taken again
// and read from its last checkpoint, so the records handled after that
// checkpoint are handled again.
func leasesGivenUp(logs string) []int32 {
	var out []int32
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, "partition lease lost") && !strings.Contains(line, "partition lease not renewed within the trust window") {
			continue
		}
		if m := partitionField.FindStringSubmatch(line); m != nil {
			p, _ := strconv.Atoi(m[1])
			out = append(out, int32(p))
		}
	}
	return out
}

// partitionField is a log line's partition attribute, text or JSON.
var partitionField = regexp.MustCompile(`\bpartition"?[=:](\d+)`)

// seqRecorder records, per key, the seq of every envelope
// {"data":{"key":K,"seq":N}} an http handler of a node posts to it, in the
// order they arrive.
type seqRecorder struct {
	mu   sync.Mutex
	seen map[string][]int
}

// newSeqServer starts an HTTP server recording into a seqRecorder; it
// stops with the test.
func newSeqServer(t *testing.T) (*seqRecorder, *httptest.Server) {
	t.Helper()
	rec := &seqRecorder{seen: map[string][]int{}}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var env struct {
			Data struct {
				Key string `json:"key"`
				Seq int    `json:"seq"`
			} `json:"data"`
		}
		_ = json.NewDecoder(r.Body).Decode(&env)
		rec.mu.Lock()
		rec.seen[env.Data.Key] = append(rec.seen[env.Data.Key], env.Data.Seq)
		rec.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(hs.Close)
	return rec, hs
}

// total is how many envelopes arrived.
func (r *seqRecorder) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.seen {
		n += len(s)
	}
	return n
}

// caughtUp reports whether every key's latest envelope is its nth: every
// record was handled, and any replay has caught up. Counting envelopes
// instead would end the wait early when some were handled twice. When
// not, it says which key is behind (a testenv.Eventually check).
func (r *seqRecorder) caughtUp(keys []string, n int) (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		if s := r.seen[k]; len(s) == 0 || s[len(s)-1] != n {
			return false, fmt.Sprintf("%s saw %v, want its last to be %d", k, s, n)
		}
	}
	return true, ""
}

// upLines is the protctl_subscription_up series of a /metrics page: the
// state a wait for a subscription's state reports.
func upLines(t *testing.T, metrics string) string {
	t.Helper()
	var up []string
	for _, m := range testenv.ParseScrape(t, metrics)["protctl_subscription_up"].GetMetric() {
		up = append(up, fmt.Sprintf("%v %v", m.GetLabel(), m.GetGauge().GetValue()))
	}
	return strings.Join(up, "; ")
}

// seriesOf counts the series of family name in a scrape whose
// subscription label is sub.
func seriesOf(t *testing.T, metrics, name, sub string) int {
	t.Helper()
	n := 0
	for _, m := range testenv.ParseScrape(t, metrics)[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "subscription" && l.GetValue() == sub {
				n++
			}
		}
	}
	return n
}

// subscriptionLabels is every value of a subscription label in a
// scrape, sorted, each once.
func subscriptionLabels(t *testing.T, metrics string) []string {
	t.Helper()
	var subs []string
	for _, f := range testenv.ParseScrape(t, metrics) {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "subscription" && !slices.Contains(subs, l.GetValue()) {
					subs = append(subs, l.GetValue())
				}
			}
		}
	}
	slices.Sort(subs)
	return subs
}

// wantInOrder fails unless every key saw 1..n in order: exactly once when
// the node gave no lease up (giveUps 0, see leasesGivenUp); otherwise at
// least once, a replay stepping back to an earlier record but never
// skipping one (what a partition read again from its last checkpoint
// gives).
func (r *seqRecorder) wantInOrder(t *testing.T, keys []string, n, giveUps int) {
	t.Helper()
	want := make([]int, n)
	for i := range want {
		want[i] = i + 1
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		seen := r.seen[k]
		if giveUps == 0 {
			if fmt.Sprint(seen) != fmt.Sprint(want) {
				t.Errorf("key %s handled %v, want %v (exactly once: no lease was given up)", k, seen, want)
			}
			continue
		}
		prev, top := 0, 0
		for _, s := range seen {
			if s < 1 || s > prev+1 {
				t.Errorf("key %s handled %v: %d after %d skips a record (%d leases given up: replays may step back, never ahead)", k, seen, s, prev, giveUps)
				break
			}
			prev, top = s, max(top, s)
		}
		if top != n {
			t.Errorf("key %s handled %v, want every one of 1..%d", k, seen, n)
		}
	}
	if giveUps > 0 {
		t.Logf("the node gave %d leases up (trust window passed or renewal refused): records after a checkpoint were handled again", giveUps)
	}
}

// seqRecords are n envelopes per key for topic (seq 1..n, an id header),
// each key on partition index%3.
func seqRecords(topic string, keys []string, n int) []*kgo.Record {
	var records []*kgo.Record
	for seq := 1; seq <= n; seq++ {
		for i, k := range keys {
			v := fmt.Sprintf(`{"data":{"key":"%s","seq":%d},"metadata":{"headers":{"id":"%s-%d"}}}`, k, seq, k, seq)
			records = append(records, &kgo.Record{Topic: topic, Partition: int32(i % 3), Key: []byte(k), Value: []byte(v)})
		}
	}
	return records
}

// What /metrics says when Kafka is down is what is known, not a guess: a
// Kafka topic subscription whose broker is a closed port is "unavailable"
// (up 0), not running, and has no lag sample (unknown, not 0), under its
// configured name only; the Redis subscription next to it runs and has
// its lag.
func TestRunNodeMetricsWhenKafkaIsUnreachable(t *testing.T) {
	srv := testenv.StartRedis(t)
	closed, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "node.yaml")
	writeFile(t, path, redisAndKafkaNodeYAML(srv.URL(), fmt.Sprintf("127.0.0.1:%d", closed)))
	base, stop := startRunNode(t, path)

	var metrics string
	testenv.Eventually(t, 2*time.Minute, "ledger-sync unavailable", func() (bool, string) {
		_, metrics = httpGet(t, base+"/metrics")
		v, ok := metricValue(t, metrics, `protctl_subscription_up{subscription="ledger-sync",state="unavailable"}`)
		return ok && v == 0, upLines(t, metrics)
	})
	if _, ok := metricValue(t, metrics, `protctl_lag{subscription="ledger-sync"}`); ok {
		t.Errorf("a lag for ledger-sync, whose Kafka cannot be reached:\n%s", metrics)
	}
	if n := seriesOf(t, metrics, "protctl_subscription_up", "ledger-sync"); n != 1 {
		t.Errorf("ledger-sync's up is %d samples, want one:\n%s", n, metrics)
	}
	if v, ok := metricValue(t, metrics, `protctl_subscription_up{subscription="projector",state="running"}`); !ok || v != 1 {
		t.Errorf("projector not running (%v %v):\n%s", v, ok, metrics)
	}
	if v, ok := metricValue(t, metrics, `protctl_lag{subscription="projector"}`); !ok || v != 0 {
		t.Errorf("projector lag %v (present %v), want 0: Redis answers\n%s", v, ok, metrics)
	}
	if subs := subscriptionLabels(t, metrics); slices.ContainsFunc(subs, func(s string) bool { return strings.HasPrefix(s, "topic:") }) {
		t.Errorf("a metric labelled with the internal topic:<topic> name (%v):\n%s", subs, metrics)
	}
	_, status := httpGet(t, base+"/v1/status")
	if !strings.Contains(status, `"state": "unavailable"`) {
		t.Errorf("/v1/status does not say unavailable:\n%s", status)
	}
	if err := stop(); err != nil {
		t.Errorf("drain: %v", err)
	}
}

// redisAndKafkaNodeYAML is a node config of service shop with two
// subscriptions logging what they get: projector reads Redis category
// shop::order, ledger-sync Kafka topic orders from broker.
func redisAndKafkaNodeYAML(redisURL, broker string) string {
	return fmt.Sprintf(`service: shop
node: node-1
redis: {url: "%s"}
kafka: {brokers: ["%s"]}
admin: {listen: "127.0.0.1:0"}
lease: {ttl: 2s, renewEvery: 400ms}
drain: {timeout: 5s}
subscriptions:
  - name: projector
    redis: {categories: [shop::order]}
    handler: {log: {}}
  - name: ledger-sync
    kafka: {topic: orders}
    handler: {log: {}}
`, redisURL, broker)
}

// The same on the Redis side: once Redis dies under a running node, its
// subscription is "unavailable" (up 0), not running, and no lag is
// reported (it cannot be read), where it said running 1 and lag 0.
func TestRunNodeMetricsWhenRedisIsUnreachable(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	if err := <-publishEvents(t, c, keyNames(2), 1, 0); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "node.yaml")
	writeFile(t, path, nodeYAML(srv.URL(), "node-1", "      log: {}\n", 5*time.Second))
	base, stop := startRunNode(t, path)

	var metrics string
	testenv.Eventually(t, time.Minute, "projector running with a lag of 0", func() (bool, string) {
		_, metrics = httpGet(t, base+"/metrics")
		up, ok1 := metricValue(t, metrics, `protctl_subscription_up{subscription="`+procGroup+`",state="running"}`)
		lag, ok2 := metricValue(t, metrics, `protctl_lag{subscription="`+procGroup+`"}`)
		return ok1 && ok2 && up == 1 && lag == 0, fmt.Sprintf("lag %v (present %v); %s", lag, ok2, upLines(t, metrics))
	})
	srv.Kill()
	testenv.Eventually(t, 2*time.Minute, "projector unavailable once Redis is gone", func() (bool, string) {
		_, metrics = httpGet(t, base+"/metrics")
		v, ok := metricValue(t, metrics, `protctl_subscription_up{subscription="`+procGroup+`",state="unavailable"}`)
		return ok && v == 0, upLines(t, metrics)
	})
	if lag := testenv.ParseScrape(t, metrics)["protctl_lag"]; lag != nil {
		t.Errorf("a lag while Redis cannot be reached:\n%s", metrics)
	}
	_ = stop() // the drain cannot release anything in a dead Redis
}
