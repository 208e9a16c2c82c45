package topic

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/clock"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

// BenchmarkTopicLanes measures what the runtime adds per record on top of
// reading it: delivery into the window and lanes, dedup, the handler
// call (a no-op) and marking it done. One partition, 100 aggregates,
// records with a key and (idHeader) an id header, as in
// bench/kafka_test.go, or (noIdentity) no header and no envelope id, so
// nothing to deduplicate on by identity. idHeader/Get has the handler
// read the id header (Message.Headers.Get, a string per record). Records are reused round after round (all
// are done by then), so the figures are the runtime's alone.
func BenchmarkTopicLanes(b *testing.B) {
	for _, c := range []struct {
		name         string
		headers, get bool
	}{
		{"idHeader", true, false},
		{"idHeader/Get", true, true},
		{"noIdentity", false, false},
	} {
		headers := c.headers
		var h runtime.Handler = runtime.HandlerFunc(func(context.Context, runtime.Message) error { return nil })
		if c.get {
			h = runtime.HandlerFunc(func(_ context.Context, m runtime.Message) error {
				if m.Headers.Get("id") == "" {
					return errors.New("no id header")
				}
				return nil
			})
		}
		b.Run(c.name, func(b *testing.B) {
			t, err := New(Config{
				Topic:         "t",
				Subscriptions: []Subscription{{Name: "s", Handler: h}},
				Source:        Kafka(nil),
				Leases:        memorybroker.New(),
				Checkpoints:   noCheckpoints{},
				Ledger:        nil2Ledger(),
			})
			if err != nil {
				b.Fatal(err)
			}
			t.clk = clock.System()
			t.log = slog.New(slog.NewTextHandler(io.Discard, nil))
			t.runCtx, t.runCancel = context.WithCancelCause(context.Background())
			defer t.runCancel(nil)
			l := &topicLease{p: 0, fence: broker.Fence{LeaseKey: "l", Token: "n:1"}, gen: 1}
			l.trust.Begin(time.Now(), time.Hour)
			tp := newTopicPart(t, l)
			tp.addSub(t.subs[0], 0, -1)
			sp := tp.subs[0]
			const chunk = 1000
			recs := make([]*kgo.Record, chunk)
			infos := make([]recInfo, 0, chunk)
			for i := range recs {
				agg := "agg-" + strconv.Itoa(i%100)
				recs[i] = &kgo.Record{Key: []byte(agg), Value: []byte(`{"data":{"n":1},"type":"Bench"}`)}
			}
			b.ReportAllocs()
			cpu0 := benchCPU()
			b.ResetTimer()
			for done := 0; done < b.N; done += chunk {
				// Records are reused (all are done by now); each round has
				// new offsets and identities.
				for i, r := range recs {
					r.Offset = int64(done + i)
					if headers {
						if r.Headers == nil {
							r.Headers = []kgo.RecordHeader{{Key: "id", Value: make([]byte, 0, 24)}}
						}
						r.Headers[0].Value = strconv.AppendInt(r.Headers[0].Value[:0], r.Offset, 10)
					}
				}
				infos = infos[:0]
				for _, r := range recs {
					infos = append(infos, t.recInfoOf(r, tp.pstr))
				}
				tp.mu.Lock()
				sp.deliverLocked(recs, infos)
				for sp.win.inflight() > 0 {
					tp.cond.Wait()
				}
				tp.mu.Unlock()
			}
			b.StopTimer()
			b.ReportMetric(float64((benchCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu_ns/rec")
		})
	}
}

type noCheckpoints struct{ runtime.Checkpoints }

func nil2Ledger() ledger.Ledger { return struct{ ledger.Ledger }{} }

// benchCPU is the process's CPU time (user + system): on a shared machine
// it moves much less than wall time.
func benchCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
