//go:build unix

package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/internal/testenv"
)

// TestRunNodeKafkaOutageIsUnavailable: a node running a Redis and a Kafka
// subscription names each by its configured name (the config's `name:`)
// in /v1/status and in every metric label, never the node's internal
// "topic:orders". When the Kafka brokers stop answering after the topic
// subscription was running (every connection closed, every new one
// refused), it is reported unavailable (up 0) in /metrics and /v1/status,
// with no lag (unknown, not 0), while the Redis one keeps running; when
// the brokers answer again it is running again, lag back. Before, it
// stayed "running" 1 through the outage (the reader keeps waiting, and
// only the join looked at Kafka's health), and /v1/status listed it as
// "topic:orders".
func TestRunNodeKafkaOutageIsUnavailable(t *testing.T) {
	srv := testenv.StartRedis(t)
	gate := testenv.NewGate()
	k := testenv.StartKafkaWith(t, []kfake.Opt{kfake.ListenFn(gate.Listen)}, 2, "orders")
	k.Produce(t, k.Client(t),
		&kgo.Record{Topic: "orders", Partition: 0, Key: []byte("o-1"), Value: []byte(`{"n":1}`)},
		&kgo.Record{Topic: "orders", Partition: 1, Key: []byte("o-2"), Value: []byte(`{"n":2}`)},
	)
	path := filepath.Join(t.TempDir(), "node.yaml")
	writeFile(t, path, redisAndKafkaNodeYAML(srv.URL(), k.Brokers[0]))
	base, stop := startRunNode(t, path)
	configured := []string{"ledger-sync", "projector"}

	var metrics string
	state := func(sub string) (string, bool) {
		for _, s := range []string{"running", "unavailable", "joining", "failed", "stopping", "stopped", "new"} {
			if v, ok := metricValue(t, metrics, `protctl_subscription_up{subscription="`+sub+`",state="`+s+`"}`); ok {
				return s, v == 1
			}
		}
		return "", false
	}
	lag := func(sub string) bool {
		_, ok := metricValue(t, metrics, `protctl_lag{subscription="`+sub+`"}`)
		return ok
	}
	running := func() bool {
		_, metrics = httpGet(t, base+"/metrics")
		s, up := state("ledger-sync")
		return s == "running" && up && lag("ledger-sync")
	}
	eventuallyTrue(t, 2*time.Minute, "ledger-sync running, with a lag", running)
	checkConfiguredNames(t, base, metrics, configured)
	if s := statusStates(t, base); s["ledger-sync"] != "running" || s["projector"] != "running" {
		t.Errorf("/v1/status states %v, want both running", s)
	}

	gate.Cut()
	eventuallyTrue(t, 2*time.Minute, "ledger-sync unavailable once Kafka stops answering", func() bool {
		_, metrics = httpGet(t, base+"/metrics")
		s, up := state("ledger-sync")
		return s == "unavailable" && !up
	})
	if lag("ledger-sync") {
		t.Errorf("a lag for ledger-sync, whose brokers do not answer:\n%s", metrics)
	}
	if s, up := state("projector"); s != "running" || !up || !lag("projector") {
		t.Errorf("projector %s (up %v, lag %v) while only Kafka is down:\n%s", s, up, lag("projector"), metrics)
	}
	if s := statusStates(t, base); s["ledger-sync"] != "unavailable" || s["projector"] != "running" {
		t.Errorf("/v1/status states %v during the outage", s)
	}
	checkConfiguredNames(t, base, metrics, configured)

	gate.Restore()
	eventuallyTrue(t, 2*time.Minute, "ledger-sync running again once Kafka answers", running)
	if s := statusStates(t, base); s["ledger-sync"] != "running" {
		t.Errorf("/v1/status states %v after the outage", s)
	}
	if err := stop(); err != nil {
		t.Errorf("drain: %v", err)
	}
}

// statusStates reads each subscription's state from /v1/status.
func statusStates(t *testing.T, base string) map[string]string {
	t.Helper()
	code, body := httpGet(t, base+"/v1/status")
	var doc struct {
		Subscriptions []struct{ Name, State string } `json:"subscriptions"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &doc) != nil {
		t.Fatalf("/v1/status %d: %s", code, body)
	}
	out := map[string]string{}
	for _, s := range doc.Subscriptions {
		out[s.Name] = s.State
	}
	return out
}

func checkConfiguredNames(t *testing.T, base, metrics string, configured []string) {
	t.Helper()
	_, body := httpGet(t, base+"/v1/status")
	var doc struct {
		Held          []struct{ Subscription string } `json:"held"`
		Subscriptions []struct{ Name string }         `json:"subscriptions"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("/v1/status: %v\n%s", err, body)
	}
	var names []string
	for _, s := range doc.Subscriptions {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, configured) {
		t.Errorf("/v1/status subscriptions %v, want the configured %v:\n%s", names, configured, body)
	}
	for _, h := range doc.Held {
		if !slices.Contains(configured, h.Subscription) {
			t.Errorf("/v1/status holds a partition of %q, not a configured name", h.Subscription)
		}
	}
	labelled := subscriptionLabels(t, metrics)
	for _, n := range labelled {
		if !slices.Contains(configured, n) {
			t.Errorf("a metric labelled subscription=%q, not a configured name", n)
		}
	}
	for _, n := range configured {
		if !slices.Contains(labelled, n) {
			t.Errorf("no metric labelled subscription=%q", n)
		}
	}
}
