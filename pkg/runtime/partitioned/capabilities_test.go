package partitioned_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/memstore"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
)

// lockedBuffer is a log sink safe for the node's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// records returns the log records whose message is msg.
func (l *lockedBuffer) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

// wrapped hides every optional capability of the broker it wraps, as a
// metrics or tracing wrapper that forwards only the contract does.
type wrapped struct{ broker.PartitionedBroker }

const capabilityWarning = "broker lacks optional capabilities"

// startLogged starts and stops a node running one subscription on b and
// returns what it logged.
func startLogged(t *testing.T, b broker.PartitionedBroker, store *memstore.Store) *lockedBuffer {
	t.Helper()
	sub, err := partitioned.New(partitioned.Config{
		Name: group, Categories: []string{cat}, Broker: b, Ledger: store,
		Handler: runtime.HandlerFunc(func(context.Context, runtime.Message) error { return nil }),
	})
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	n, err := runtime.NewNode(runtime.NodeConfig{
		Service: service, NodeID: "node-1", Membership: store,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}, sub)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	return logs
}

// A broker wrapped so that its optional capabilities are hidden still
// works, but the engine says so once at start, naming each capability it
// lacks and what its absence costs; the memory broker, which lacks four,
// is named for those only.
func TestStartWarnsOfMissingCapabilities(t *testing.T) {
	all := []string{"broker.EntryWaiter", "broker.StreamTailer", "broker.PartitionWatcher", "broker.BatchRenewer",
		"broker.AckReader", "broker.BatchReader", "broker.BatchAcquirer", "broker.BatchReleaser", "broker.PartitionCounter",
		"broker.AppendWatcher", "broker.EntryChecker", "broker.ReaderPinner", "broker.PartitionSeeker", "broker.WaitReader"}
	for _, tc := range []struct {
		name    string
		wrap    func(*memorybroker.Broker) broker.PartitionedBroker
		missing []string
	}{
		{"wrapped broker", func(b *memorybroker.Broker) broker.PartitionedBroker { return wrapped{b} }, all},
		{"memory broker", func(b *memorybroker.Broker) broker.PartitionedBroker { return b },
			[]string{"broker.PartitionCounter", "broker.AppendWatcher", "broker.EntryChecker", "broker.ReaderPinner", "broker.PartitionSeeker", "broker.WaitReader"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := memorybroker.New()
			logs := startLogged(t, tc.wrap(b), memstore.New(b.Faults()))
			recs := logs.records(t, capabilityWarning)
			if len(recs) != 1 {
				t.Fatalf("%d %q records, want exactly 1", len(recs), capabilityWarning)
			}
			r := recs[0]
			if r["level"] != "WARN" || r["subscription"] != group {
				t.Errorf("warning %v: want level WARN and subscription %q", r, group)
			}
			missing := strings.Split(r["missing"].(string), ",")
			if !slices.Equal(missing, tc.missing) {
				t.Errorf("missing = %v, want %v", missing, tc.missing)
			}
			costs := r["costs"].(string)
			for _, name := range tc.missing {
				if !strings.Contains(costs, name+": ") {
					t.Errorf("costs %q do not say what lacking %s costs", costs, name)
				}
			}
			if slices.Contains(tc.missing, "broker.EntryWaiter") && !strings.Contains(costs, "SweepEvery") {
				t.Errorf("costs %q do not say idle partitions are polled", costs)
			}
		})
	}
}
