package bench

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/memstore"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

// The latency benchmarks measure what a user of a live flow feels: the
// time from a publish to the handler call while events keep arriving at a
// steady rate, for the runtime and for a plain consumer of the same
// events in the same run.

// latRecorder keeps, per event sequence number, when its handler call
// came (nanoseconds after the publish; 0: not yet), for one consumer.
type latRecorder struct {
	name      string        // "runtime" or "plain", for the execution trace
	traceSlow time.Duration // see latTraceSlow
	lat       []atomic.Int64
	n         atomic.Int64 // handler calls, duplicates included
	dups      atomic.Int64
}

func newLatRecorder(name string, events int) *latRecorder {
	slow := latTraceSlow
	if v, err := time.ParseDuration(os.Getenv("PROTCTL_BENCH_LATENCY_TRACE_SLOW")); err == nil {
		slow = v
	}
	return &latRecorder{name: name, traceSlow: slow, lat: make([]atomic.Int64, events)}
}

// record parses the sequence number and publish time out of an event's
// data (latEnvelope) and records the latency.
func (r *latRecorder) record(data []byte) {
	now := time.Now().UnixNano()
	seq, t := latParse(data)
	r.n.Add(1)
	if seq < 0 || seq >= len(r.lat) {
		return
	}
	if !r.lat[seq].CompareAndSwap(0, max(now-t, 1)) {
		r.dups.Add(1)
	}
	// Under -test.trace, an event slower than latTraceSlow is logged in
	// the execution trace where its handler ran, so that the trace shows
	// what the consumer did while it waited.
	if d := time.Duration(now - t); d > r.traceSlow && trace.IsEnabled() {
		trace.Logf(context.Background(), "slow-"+r.name, "seq %d latency %d published %d", seq, d, t)
	}
}

// latTraceSlow is the latency past which an event is logged in an
// execution trace, unless PROTCTL_BENCH_LATENCY_TRACE_SLOW says.
const latTraceSlow = 5 * time.Millisecond

// summary returns the sorted latencies of the events handled and how many
// were not.
func (r *latRecorder) summary() (sorted []time.Duration, missing int) {
	for i := range r.lat {
		v := r.lat[i].Load()
		if v == 0 {
			missing++
			continue
		}
		sorted = append(sorted, time.Duration(v))
	}
	slices.Sort(sorted)
	return sorted, missing
}

func latPct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)-1))
	return sorted[i]
}

// latEnvelope is a Protean-shaped envelope carrying seq and the publish
// time.
func latEnvelope(seq int, t int64) string {
	return `{"data":{"s":` + strconv.Itoa(seq) + `,"t":` + strconv.FormatInt(t, 10) +
		`},"metadata":{"headers":{"id":"e` + strconv.Itoa(seq) + `","type":"Bench.Latency"}}}`
}

func latParse(data []byte) (seq int, t int64) {
	seq, t = -1, 0
	if i := bytes.Index(data, []byte(`"s":`)); i >= 0 {
		rest := data[i+4:]
		j := bytes.IndexByte(rest, ',')
		if j > 0 {
			seq, _ = strconv.Atoi(string(rest[:j]))
		}
	}
	if i := bytes.Index(data, []byte(`"t":`)); i >= 0 {
		rest := data[i+4:]
		j := bytes.IndexByte(rest, '}')
		if j > 0 {
			t, _ = strconv.ParseInt(string(rest[:j]), 10, 64)
		}
	}
	return seq, t
}

// latScenario picks the key of each event.
type latScenario struct {
	name string
	// keys is how many keys exist before the run (written one entry each
	// and handled): 0 for new keys.
	keys int
	key  func(seq int, rng *rand.Rand) string
	// hold: the keys' partitions are idle (no lease) when the run starts.
	idle bool
}

func latScenarios(rng *rand.Rand) []latScenario {
	zipf := rand.NewZipf(rng, 1.1, 1, 999)
	return []latScenario{
		{name: "new", key: func(seq int, _ *rand.Rand) string { return "n" + strconv.Itoa(seq) }},
		{name: "idle", keys: 1000, idle: true, key: func(_ int, r *rand.Rand) string { return rtKey(r.IntN(1000)) }},
		{name: "hot", keys: 12, key: func(seq int, _ *rand.Rand) string { return rtKey(seq % 12) }},
		{name: "zipf", keys: 1000, key: func(int, *rand.Rand) string { return rtKey(int(zipf.Uint64())) }},
	}
}

// latStartPlain runs latPlain on a client of its own on addr until the
// returned stop is called.
func latStartPlain(ctx context.Context, b *testing.B, addr string, streams []string, group string, handle func([]byte)) (stop func()) {
	pc := redis.NewClient(&redis.Options{Addr: addr})
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := latPlainLoop()(pctx, pc, streams, group, handle); err != nil {
			b.Error(err)
		}
	}()
	return func() {
		cancel()
		wg.Wait()
		_ = pc.Close()
	}
}

// latPlainLoop is the plain loop's code: latPlain, or the experiment
// PROTCTL_BENCH_LATENCY_PLAIN names.
func latPlainLoop() func(ctx context.Context, c *redis.Client, streams []string, group string, handle func([]byte)) error {
	switch os.Getenv("PROTCTL_BENCH_LATENCY_PLAIN") {
	case "fenced-block":
		return latFencedBlock
	case "fenced-block-each":
		return latFencedBlockEach
	}
	return latPlain
}

// latPlain is the baseline: one loop of XREADGROUP BLOCK over every
// stream of the run (COUNT 100 per stream), calling the handler for each
// entry and acking each stream's batch in one pipeline, until ctx ends.
func latPlain(ctx context.Context, c *redis.Client, streams []string, group string, handle func([]byte)) error {
	args := make([]string, 0, 2*len(streams))
	args = append(args, streams...)
	for range streams {
		args = append(args, ">")
	}
	for ctx.Err() == nil {
		res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: group, Consumer: "plain", Streams: args, Count: 100, Block: time.Second,
		}).Result()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		pipe := c.Pipeline()
		for _, st := range res {
			ids := make([]string, len(st.Messages))
			for i, m := range st.Messages {
				v, _ := m.Values[broker.DataField].(string)
				handle([]byte(v))
				ids[i] = m.ID
			}
			if len(ids) > 0 {
				pipe.XAck(ctx, st.Stream, group, ids...)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil && ctx.Err() == nil {
			return err
		}
	}
	return nil
}

// latFencedBlock is an experiment, not a baseline (the "plain" column
// with PROTCTL_BENCH_LATENCY_PLAIN=fenced-block): the shape a held,
// drained partition's wait could take without a round trip of its own for
// the fenced read. One loop sends, in one pipeline on one connection, the
// last batch's acks, a blocking XREAD of every stream from the last id
// the group delivered, and a script that reads every stream for the group
// under a lease check (a GET compared with a token, as a fence is). The
// server runs the script as soon as the XREAD returns, so an entry costs
// the blocked read's wake-up and the script, and no further round trip.
// It reads every stream at each wake, which is why it suits few streams
// (hot keys), and it is not a consumer protctl ships.
func latFencedBlock(ctx context.Context, c *redis.Client, streams []string, group string, handle func([]byte)) error {
	const token = "latfence"
	fences := make([]string, len(streams))
	last := make([]string, len(streams))
	for i, st := range streams {
		fences[i] = "latfence:" + st
		if err := c.Set(ctx, fences[i], token, 0).Err(); err != nil {
			return err
		}
		gs, err := c.XInfoGroups(ctx, st).Result()
		if err != nil {
			return err
		}
		last[i] = "0-0"
		for _, g := range gs {
			if g.Name == group {
				last[i] = g.LastDeliveredID
			}
		}
	}
	read := redis.NewScript(`
local out = {}
for i = 1, #KEYS / 2 do
  if redis.call('GET', KEYS[i]) ~= ARGV[1] then return redis.error_reply('LEASELOST') end
  local r = redis.call('XREADGROUP', 'GROUP', ARGV[2], 'fenced', 'COUNT', 100, 'STREAMS', KEYS[#KEYS / 2 + i], '>')
  out[i] = r and r[1][2] or {}
end
return out`)
	keys := append(append([]string{}, fences...), streams...)
	if err := read.Load(ctx, c).Err(); err != nil {
		return err
	}
	acks := make([][]string, len(streams))
	for ctx.Err() == nil {
		pipe := c.Pipeline()
		for i, ids := range acks {
			if len(ids) > 0 {
				pipe.XAck(ctx, streams[i], group, ids...)
			}
			acks[i] = nil
		}
		xargs := append(append([]string{}, streams...), last...)
		pipe.XRead(ctx, &redis.XReadArgs{Streams: xargs, Count: 1, Block: time.Second})
		got := read.EvalSha(ctx, pipe, keys, token, group)
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil && ctx.Err() == nil {
			return err
		}
		res, err := got.Slice()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for i, r := range res {
			entries, _ := r.([]any)
			for _, e := range entries {
				fields := e.([]any)
				id := fields[0].(string)
				kv := fields[1].([]any)
				for j := 0; j+1 < len(kv); j += 2 {
					if kv[j] == broker.DataField {
						handle([]byte(kv[j+1].(string)))
					}
				}
				acks[i] = append(acks[i], id)
				last[i] = id
			}
		}
	}
	return nil
}

// latFencedBlockEach is latFencedBlock with a loop, and a connection,
// per stream (PROTCTL_BENCH_LATENCY_PLAIN=fenced-block-each): a wake
// reads only its own stream.
func latFencedBlockEach(ctx context.Context, c *redis.Client, streams []string, group string, handle func([]byte)) error {
	var wg sync.WaitGroup
	errs := make([]error, len(streams))
	for i, st := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = latFencedBlock(ctx, c, []string{st}, group, handle)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// latPublish writes events events at rate per second the way Protean's
// RedisBroker writes them (SADD C:__partitions__ K, XADD C:K * data ...,
// pipelined), paced: each event is sent at its due time, or at once with
// the others already due when the publisher is late. It stamps every
// event with the time it is sent.
func latPublish(ctx context.Context, tb testing.TB, c *redis.Client, category string, keys []string, rate int) time.Duration {
	tb.Helper()
	return latPublishTo(ctx, tb, []*redis.Client{c}, category, keys, 0, rate)
}

// latMaxPipeline bounds the events of one of the publisher's pipelines. A
// publisher behind its schedule (the machine's cores busy) sends what is
// due in pipelines of at most this many, back to back: in one pipeline of
// everything due, tens of thousands of events once, every event carried
// the stamp of the pipeline's start, and what it had sent was known only
// when the whole pipeline was answered, which made the ramp's halfway
// backlog read 0 (BenchmarkSustainableRateRedis).
const latMaxPipeline = 1000

// latPublishTo is latPublish writing every event to each server of cs
// (BenchmarkLatencyRedis's separate servers), each server's copy stamped
// with the time its pipeline is sent, the servers taken in turn first.
func latPublishTo(ctx context.Context, tb testing.TB, cs []*redis.Client, category string, keys []string, seqBase, rate int) time.Duration {
	tb.Helper()
	turn := 0
	return latSchedule(len(keys), rate, latMaxPipeline, func(from, to int) {
		for j := range cs {
			pipe := cs[(turn+j)%len(cs)].Pipeline()
			latAppend(ctx, pipe, category, keys, seqBase, from, to, time.Now().UnixNano())
			if _, err := pipe.Exec(ctx); err != nil {
				tb.Fatal(err)
			}
		}
		turn++
	})
}

// latSchedule paces n events at rate: it calls send with each run of
// events due, [from, to), at most most of them, at once when it is late,
// and returns how long it took.
func latSchedule(n, rate, most int, send func(from, to int)) time.Duration {
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := 0; i < n; {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		from, now := i, time.Now()
		for i < n && i-from < most && !start.Add(time.Duration(i)*interval).After(now) {
			i++
		}
		send(from, i)
	}
	return time.Since(start)
}

// latAppend queues events [from, to) of keys on pipe as Protean's
// RedisBroker writes them, stamped at, event k numbered seqBase+k.
func latAppend(ctx context.Context, pipe redis.Pipeliner, category string, keys []string, seqBase, from, to int, at int64) {
	l := broker.ProteanLayout
	for k := from; k < to; k++ {
		pipe.SAdd(ctx, l.IndexKey(category), keys[k])
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: l.Stream(category, keys[k]), Values: []string{broker.DataField, latEnvelope(seqBase+k, at)}})
	}
}

// latResult is one consumer's figures for one run.
type latResult struct {
	p50, p90, p99, max time.Duration
	missing            int
	dups               int64
	// slowest are the slowest events, slowest first (at most
	// latSlowest): when in the run the tail came, a stall (a few events
	// in a row) or a spread.
	slowest []latSlow
	// sorted are the latencies of the events handled, for latMerge.
	sorted []time.Duration
}

// latSlow is one event's latency and sequence number.
type latSlow struct {
	d   time.Duration
	seq int
}

// latSlowerFirst orders events slowest first, and in the order they were
// published among equals.
func latSlowerFirst(a, b latSlow) int {
	return cmp.Or(cmp.Compare(b.d, a.d), cmp.Compare(a.seq, b.seq))
}

// latSlowest is how many of the slowest events a latResult names.
const latSlowest = 5

// slowestAt says how slow the slowest events were and when they were
// published, in seconds of the schedule at rate (a run in slices: the
// slices one after the other).
func (r latResult) slowestAt(rate int) string {
	var b strings.Builder
	for i, s := range r.slowest {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%.1f ms at %.2f s", float64(s.d)/1e6, float64(s.seq)/float64(rate))
	}
	return b.String()
}

func (r latResult) String() string {
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) }
	s := fmt.Sprintf("p50 %s p90 %s p99 %s max %s ms", ms(r.p50), ms(r.p90), ms(r.p99), ms(r.max))
	if r.missing > 0 {
		s += fmt.Sprintf(" (%d not handled)", r.missing)
	}
	return s
}

func latResultOf(rec *latRecorder) latResult {
	sorted, missing := rec.summary()
	r := latResult{missing: missing, dups: rec.dups.Load(), sorted: sorted}
	for seq := range rec.lat {
		d := time.Duration(rec.lat[seq].Load())
		if d == 0 || (len(r.slowest) == latSlowest && d <= r.slowest[latSlowest-1].d) {
			continue
		}
		r.slowest = append(r.slowest, latSlow{d, seq})
		slices.SortFunc(r.slowest, latSlowerFirst)
		r.slowest = r.slowest[:min(len(r.slowest), latSlowest)]
	}
	r.percentiles()
	return r
}

func (r *latResult) percentiles() {
	if s := r.sorted; len(s) > 0 {
		r.p50, r.p90, r.p99, r.max = latPct(s, 0.50), latPct(s, 0.90), latPct(s, 0.99), s[len(s)-1]
	}
}

// latMerge is the figures of parts taken together, parts[i] having read
// the events from starts[i] on (its sequence numbers count from there).
func latMerge(parts []latResult, starts []int) latResult {
	var r latResult
	for i, p := range parts {
		r.missing += p.missing
		r.dups += p.dups
		r.sorted = append(r.sorted, p.sorted...)
		for _, sl := range p.slowest {
			r.slowest = append(r.slowest, latSlow{sl.d, sl.seq + starts[i]})
		}
	}
	slices.Sort(r.sorted)
	slices.SortFunc(r.slowest, latSlowerFirst)
	r.slowest = r.slowest[:min(len(r.slowest), latSlowest)]
	r.percentiles()
	return r
}

// latOutcome is one run of a scenario at a rate: both consumers' figures
// and what the run cost.
type latOutcome struct {
	rt, plain latResult
	// published is the rate the publisher reached (events/s).
	published float64
	// rtTrips and rtCmds are the runtime client's round trips and
	// commands per event, from the first publish until both consumers
	// handled everything (-1: not known, the runtime ran in another
	// process).
	rtTrips, rtCmds float64
	// serverUS is the server's main thread's CPU time per event over
	// the same span, both consumers and the publisher together (INFO
	// cpu): what the server spent, commands, replies and I/O alike.
	serverUS float64
	// serverTop names the commands that took most of it (INFO
	// commandstats, per event). A script's time includes the calls it
	// makes, and Redis counts those calls under their own names too, so
	// the figures overlap and do not add up to serverUS.
	serverTop string
	// plainServerUS and plainServerTop are the same for the plain loop's
	// server when each consumer has its own (serverUS is then the
	// runtime's server's, the publisher's writes to it included).
	plainServerUS  float64
	plainServerTop string
	load0, load1   string // 1-minute load average before and after
	rate           int    // events per second asked of the publisher
	// alone: each consumer read the events alone, in turn
	// (PROTCTL_BENCH_LATENCY_ALONE), in slices.
	alone  bool
	slices int
	// events is how many events the run published, and serverSpent and
	// plainServerSpent the servers' time over it (latServerSpent), from
	// which serverUS and plainServerUS are made: latRunAlone adds them
	// up over its slices.
	events                        int
	serverSpent, plainServerSpent map[string]int64
	// processUS is this process's CPU time per event (user and system),
	// the consumer's and the publisher's: the runtime's run's, and
	// plainProcessUS the plain loop's when each ran alone.
	processUS, plainProcessUS float64
}

// latServers are BenchmarkLatencyRedis's redis-servers: the runtime's and
// the plain loop's, the same one with PROTCTL_BENCH_LATENCY_SERVERS=1.
type latServers struct {
	rt, plain           *testenv.Redis
	rtAdmin, plainAdmin *redis.Client
}

// admins are the servers' clients, each server once.
func (s latServers) admins() []*redis.Client {
	if s.plain == s.rt {
		return []*redis.Client{s.rtAdmin}
	}
	return []*redis.Client{s.rtAdmin, s.plainAdmin}
}

// latRedisVariant is how BenchmarkLatencyRedis runs the runtime and calls
// the handler (PROTCTL_BENCH_LATENCY_RUNNODE).
type latRedisVariant struct {
	// bin is the protctl binary: the runtime is `protctl run node` with an
	// http handler, and the plain loop calls the same handler over http.
	// Empty: a Node in this process, an in-process handler for both.
	bin string
	// handler is the http server of both consumers' handlers (bin set).
	handler  *httptest.Server
	handlers *latHTTPHandlers
}

// BenchmarkLatencyRedis measures publish-to-handler latency of the Redis
// partitioned runtime (a Node with one subscription at the production
// defaults, an in-process handler) against a plain XREADGROUP BLOCK loop
// over the same streams calling the same handler, both consuming the same
// events (each with its own group) in the same run. Events are written
// as Protean's RedisBroker writes them, without protctl's wake-up signal.
//
// Scenarios: new (every event to a key nobody has seen: the plain loop is
// told the streams up front, the runtime must discover them), idle (1,000
// keys written and handled before, idle without a lease when the run
// starts, events to random keys), hot (12 keys, round robin) and zipf
// (1,000 keys, Zipf s=1.1). Rates: PROTCTL_BENCH_LATENCY_RATES (default
// 50,500,5000 events/s), each for PROTCTL_BENCH_LATENCY_WINDOW (default
// 2s) or PROTCTL_BENCH_LATENCY_MIN_EVENTS events (default 3,000), which
// is longer (60 s at 50/s: over 100 events, the 2 s window's, the p99 was
// the second-largest latency, one scheduling hiccup; over 1,000 it was
// the 10th, and one cluster of the machine's stalls, 10-20 slow events
// within a second, put two 50/s cells of three matrices past 2x:
// docs/benchmarks.md, fourteenth pass), new keys capped at
// PROTCTL_BENCH_LATENCY_NEWKEYS (default 3,000 events). Events not
// handled PROTCTL_BENCH_LATENCY_DRAIN (default 40s) after the last
// publish are reported as not handled.
// PROTCTL_BENCH_LATENCY_SCENARIOS picks scenarios (e.g. idle,zipf).
//
// Both consumers read one redis-server, as the issue measured them. With
// PROTCTL_BENCH_LATENCY_SERVERS=2 each reads its own, and the publisher
// writes every event to both, in turn first, each copy stamped when it is
// sent: the plain loop names every stream in each XREADGROUP, which costs
// the server in proportion to the streams at every entry (up to 80µs an
// event at 5,000/s over 1,000 keys), and on a shared server that cost
// queues the runtime's commands too, and the runtime's the plain loop's.
// Two servers take more of a small machine's CPU, which both consumers
// share either way.
//
// With PROTCTL_BENCH_LATENCY_ALONE=1 each consumer reads the events
// alone, in turn (the same keys at the same rate on the same server,
// flushed between): what a user running one of them feels, each with the
// machine to itself, as BenchmarkSustainableRateRedis runs them. Run
// together, each pays for the other: the plain loop's XREADGROUP over
// every stream holds the server for the runtime's commands, and the two
// share two cores with the server and the publisher
// (docs/decisions/0050-latency-baseline.md). The events go in
// PROTCTL_BENCH_LATENCY_SLICES slices (default 6), each through both
// consumers in turn, the first of the two alternating, so that a burst
// of the machine's stalls does not fall on one consumer's whole run.
// PROTCTL_BENCH_LATENCY_ONLY=runtime (or plain) runs one of them only,
// to profile it. This process's CPU time per event is reported for each.
//
// PROTCTL_BENCH_LATENCY_PLAIN=fenced-block (or fenced-block-each) puts an
// experiment in the plain loop's place (latFencedBlock): a fenced read
// pipelined behind a blocking XREAD, the shape a held partition's wait
// could take (docs/benchmarks.md, twelfth pass).
//
// PROTCTL_BENCH_LATENCY_WARMUP publishes the scenario's events at the
// rate for that long before the measured ones, unmeasured: the window
// then sees a node in a steady flow (new keys: the warm-up's workers
// ending as the window's begin) rather than the first of it.
// PROTCTL_BENCH_LATENCY_HEAPPROFILE=path writes the heap the node keeps
// live at the window's end (latHeapProfile).
//
// Under -test.trace, every event slower than 5 ms
// (PROTCTL_BENCH_LATENCY_TRACE_SLOW) is logged in the trace, in category
// slow-runtime or slow-plain, where its handler ran: the trace around it
// shows what the consumer, the publisher and the server's replies did.
//
// PROTCTL_BENCH_LATENCY_NOTIFY sets the server's notify-keyspace-events
// (e.g. Et: the runtime can then learn of appends from keyspace events;
// by default it uses client tracking, decision 0031).
//
// PROTCTL_BENCH_LATENCY_RUNNODE=1 runs the runtime as `protctl run node`
// (the binary built from this tree, its config's defaults) with an http
// handler, a server in this process answering 204, and runs the plain
// loop in a process of its own too (latStartPlainProcess), POSTing each
// event to the same server (one request at a time): the same comparison
// through the deployed binary.
//
// Reported per scenario and rate (one log line, and metrics): p50, p90,
// p99 and max of each consumer (ms), the ratio of the runtime's p99 to
// the plain loop's (target <= 2) and the runtime's p50 (target <= 2 ms),
// the events each did not handle, the rate the publisher reached, the
// runtime's round trips per event, the server's CPU time per event (its
// main thread) with the commands it spent most on, and the load average
// before and after.
func BenchmarkLatencyRedis(b *testing.B) {
	ctx := context.Background()
	var opts []testenv.RedisOption
	if events := os.Getenv("PROTCTL_BENCH_LATENCY_NOTIFY"); events != "" {
		opts = append(opts, testenv.WithArgs("--notify-keyspace-events", events))
	}
	srvs := latServers{rt: testenv.StartRedis(b, opts...)}
	srvs.plain = srvs.rt
	switch n := rtEnvInt(b, "PROTCTL_BENCH_LATENCY_SERVERS", 1); n {
	case 1:
	case 2:
		srvs.plain = testenv.StartRedis(b, opts...)
	default:
		b.Fatalf("PROTCTL_BENCH_LATENCY_SERVERS=%d: want 1 (one server for both consumers) or 2 (one each)", n)
	}
	srvs.rtAdmin = redis.NewClient(&redis.Options{Addr: srvs.rt.Addr})
	defer srvs.rtAdmin.Close()
	srvs.plainAdmin = srvs.rtAdmin
	if srvs.plain != srvs.rt {
		srvs.plainAdmin = redis.NewClient(&redis.Options{Addr: srvs.plain.Addr})
		defer srvs.plainAdmin.Close()
	}
	window := rtEnvDuration(b, "PROTCTL_BENCH_LATENCY_WINDOW", 2*time.Second)
	drain := rtEnvDuration(b, "PROTCTL_BENCH_LATENCY_DRAIN", 40*time.Second)
	newCap := rtEnvInt(b, "PROTCTL_BENCH_LATENCY_NEWKEYS", 3000)
	minEvents := rtEnvInt(b, "PROTCTL_BENCH_LATENCY_MIN_EVENTS", 3000)
	rates := latRates(b)
	var v latRedisVariant
	if os.Getenv("PROTCTL_BENCH_LATENCY_RUNNODE") == "1" {
		v.bin = buildProtctl(b)
		v.handlers = &latHTTPHandlers{}
		v.handler = httptest.NewServer(v.handlers)
		defer v.handler.Close()
	}
	alone := os.Getenv("PROTCTL_BENCH_LATENCY_ALONE") == "1"
	if alone && srvs.plain != srvs.rt {
		b.Fatal("PROTCTL_BENCH_LATENCY_ALONE=1 runs each consumer alone on one server: drop PROTCTL_BENCH_LATENCY_SERVERS=2")
	}
	only := envOr("PROTCTL_BENCH_LATENCY_SCENARIOS", "")
	rng := rand.New(rand.NewPCG(1, 2))
	for _, sc := range latScenarios(rng) {
		if only != "" && !slices.Contains(strings.Split(only, ","), sc.name) {
			continue
		}
		for _, rate := range rates {
			b.Run(fmt.Sprintf("%s/%d", sc.name, rate), func(b *testing.B) {
				var o latOutcome
				for i := 0; i < b.N; i++ {
					events := max(minEvents, int(float64(rate)*window.Seconds()))
					if sc.keys == 0 {
						events = min(events, newCap)
					}
					keys := latKeys(sc, events, rng)
					if alone {
						o = latRunAlone(ctx, b, srvs, v, sc, rate, keys, drain)
					} else {
						o = latRun(ctx, b, srvs, v, sc, rate, keys, drain, latBoth)
					}
				}
				latReport(b, fmt.Sprintf("%s at %d/s", sc.name, rate), o)
			})
		}
	}
}

// latRates reads PROTCTL_BENCH_LATENCY_RATES (default 50,500,5000).
func latRates(b *testing.B) []int {
	var rates []int
	for _, f := range strings.Split(envOr("PROTCTL_BENCH_LATENCY_RATES", "50,500,5000"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("PROTCTL_BENCH_LATENCY_RATES: %q is not a positive rate", f)
		}
		rates = append(rates, n)
	}
	return rates
}

// latReport reports o as metrics and as one log line that reads on its
// own.
func latReport(b *testing.B, what string, o latOutcome) {
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	b.ReportMetric(ms(o.rt.p50), "rt-p50-ms")
	b.ReportMetric(ms(o.rt.p99), "rt-p99-ms")
	b.ReportMetric(ms(o.plain.p50), "plain-p50-ms")
	b.ReportMetric(ms(o.plain.p99), "plain-p99-ms")
	ratio := math.NaN()
	if o.plain.p99 > 0 {
		ratio = float64(o.rt.p99) / float64(o.plain.p99)
		b.ReportMetric(ratio, "p99-ratio")
	}
	b.ReportMetric(float64(o.rt.missing), "rt-not-handled")
	b.ReportMetric(o.published, "published/s")
	if o.rtTrips >= 0 {
		b.ReportMetric(o.rtTrips, "rt-trips/event")
	}
	b.ReportMetric(o.serverUS, "server-cpu-us/event")
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	server := fmt.Sprintf("server CPU %.1f us per event (both consumers and the publisher; costliest commands, a script's calls counted in it and again on their own: %s)", o.serverUS, o.serverTop)
	switch {
	case o.alone:
		server = fmt.Sprintf("each consumer alone, in turn, in %d slices: server CPU %.1f us per event with the runtime (%s), %.1f with the plain loop (%s), the publisher's writes included; this process's CPU %.1f us per event with the runtime, %.1f with the plain loop, the publisher's included",
			o.slices, o.serverUS, o.serverTop, o.plainServerUS, o.plainServerTop, o.processUS, o.plainProcessUS)
		b.ReportMetric(o.processUS, "rt-process-cpu-us/event")
		b.ReportMetric(o.plainProcessUS, "plain-process-cpu-us/event")
		b.ReportMetric(o.plainServerUS, "plain-server-cpu-us/event")
	case o.plainServerTop != "":
		server = fmt.Sprintf("runtime's server CPU %.1f us per event (%s), plain's %.1f (%s), the publisher's writes included",
			o.serverUS, o.serverTop, o.plainServerUS, o.plainServerTop)
		b.ReportMetric(o.plainServerUS, "plain-server-cpu-us/event")
	}
	trips := "n/a (another process)"
	if o.rtTrips >= 0 {
		trips = fmt.Sprintf("%.2f round trips, %.2f commands per event", o.rtTrips, o.rtCmds)
	}
	b.Logf("%s (publisher reached %.0f/s; load average %s -> %s):\n"+
		"  runtime %s\n  plain   %s\n"+
		"  p99 ratio %.2f (target <= 2: %s), runtime p50 %.2f ms (target <= 2 ms: %s), runtime not handled %d, plain not handled %d\n"+
		"  runtime client %s; %s\n"+
		"  slowest events: runtime %s; plain %s",
		what, o.published, o.load0, o.load1, o.rt, o.plain,
		ratio, verdict(ratio <= 2), ms(o.rt.p50), verdict(o.rt.p50 <= 2*time.Millisecond), o.rt.missing, o.plain.missing,
		trips, server, o.rt.slowestAt(o.rate), o.plain.slowestAt(o.rate))
}

func envOr(name, def string) string {
	if v := strings.TrimSpace(os.Getenv(name)); v != "" {
		return v
	}
	return def
}

// buildProtctl builds cmd/protctl into a temporary directory.
func buildProtctl(b *testing.B) string {
	bin := filepath.Join(b.TempDir(), "protctl")
	build := exec.Command("go", "build", "-o", bin, "github.com/protctl/protctl/cmd/protctl")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		b.Fatalf("go build: %v", err)
	}
	return bin
}

// latHTTPHandlers is the handler of both consumers over http: POST
// /runtime and /plain record the envelope's latency with the recorder of
// the run, and answer 204.
type latHTTPHandlers struct {
	rt, plain atomic.Pointer[latRecorder]
}

func (h *latHTTPHandlers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var rec *latRecorder
	switch r.URL.Path {
	case "/runtime":
		rec = h.rt.Load()
	case "/plain":
		rec = h.plain.Load()
	}
	if rec != nil {
		rec.record(body)
	}
	w.WriteHeader(http.StatusNoContent)
}

// latHTTPCaller POSTs each event to url, as run node's http handler does,
// one at a time (the plain loop's handler in the run-node variant).
func latHTTPCaller(b testing.TB, url string) func([]byte) {
	c := &http.Client{Timeout: 10 * time.Second}
	return func(data []byte) {
		resp, err := c.Post(url, "application/json", bytes.NewReader(data))
		if err != nil {
			b.Error(err)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
}

// latRunNode starts `protctl run node` reading category with an http
// handler POSTing to url; stop sends SIGTERM and waits for it.
func latRunNode(b *testing.B, bin, redisURL, category, url string) (stop func()) {
	dir := b.TempDir()
	cfg := fmt.Sprintf(`service: %s
node: lat-node
redis: {url: %q}
admin: {disabled: true}
subscriptions:
  - name: %s
    redis: {categories: [%q]}
    handler:
      http: {url: %q, timeout: 10s}
`, rtService, redisURL, rtGroup, category, url)
	path := filepath.Join(dir, "node.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "node", "--config", path, "--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	return func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				b.Errorf("run node: %v", err)
			}
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			b.Error("run node did not stop within a minute of SIGTERM")
		}
	}
}

// latRun is one run of a scenario at a rate: a fresh category, the keys
// that exist before written and handled by both consumers, then events
// events published at rate while both consume.
// latWho says which consumers a run of latRun starts.
type latWho int

const (
	latBoth        latWho = iota // both, reading the same events
	latRuntimeOnly               // the runtime alone
	latPlainOnly                 // the plain loop alone
)

func (w latWho) runtime() bool { return w != latPlainOnly }
func (w latWho) plain() bool   { return w != latRuntimeOnly }

// latKeys draws the key of each of events events of sc.
func latKeys(sc latScenario, events int, rng *rand.Rand) []string {
	keys := make([]string, events)
	for i := range keys {
		keys[i] = sc.key(i, rng)
	}
	return keys
}

// latRunAlone runs keys through each consumer alone, in turn, on the
// runtime's server (PROTCTL_BENCH_LATENCY_ALONE), in slices
// (PROTCTL_BENCH_LATENCY_SLICES, default 6): each slice of keys goes
// through the runtime alone and the plain loop alone, the one that goes
// first alternating from slice to slice, and each consumer's figures are
// those of its slices together. A shared machine stalls in bursts of a
// few seconds (docs/benchmarks.md, ninth pass): in slices a burst falls
// on a part of each consumer's run rather than on the whole of one. The
// outcome's serverUS and rtTrips are the runtime's runs', plainServerUS
// the plain loop's.
func latRunAlone(ctx context.Context, b *testing.B, srvs latServers, v latRedisVariant, sc latScenario, rate int, keys []string, drain time.Duration) latOutcome {
	srvs.plain, srvs.plainAdmin = srvs.rt, srvs.rtAdmin
	n := rtEnvInt(b, "PROTCTL_BENCH_LATENCY_SLICES", 6)
	if n <= 0 {
		b.Fatalf("PROTCTL_BENCH_LATENCY_SLICES=%d: want a positive number of slices", n)
	}
	n = min(n, len(keys))
	// PROTCTL_BENCH_LATENCY_ONLY=runtime or plain runs that consumer
	// only (a profile of one).
	only := latBoth
	switch o := os.Getenv("PROTCTL_BENCH_LATENCY_ONLY"); o {
	case "":
	case "runtime":
		only = latRuntimeOnly
	case "plain":
		only = latPlainOnly
	default:
		b.Fatalf("PROTCTL_BENCH_LATENCY_ONLY=%q: want runtime or plain", o)
	}
	var rts, plains []latOutcome
	var starts []int
	for i := range n {
		lo, hi := i*len(keys)/n, (i+1)*len(keys)/n
		first, second := latRuntimeOnly, latPlainOnly
		if i%2 == 1 {
			first, second = second, first
		}
		var a, z latOutcome
		if only == latBoth || only == first {
			a = latRun(ctx, b, srvs, v, sc, rate, keys[lo:hi], drain, first)
		}
		if only == latBoth || only == second {
			z = latRun(ctx, b, srvs, v, sc, rate, keys[lo:hi], drain, second)
		}
		if i%2 == 1 {
			a, z = z, a
		}
		rts, plains, starts = append(rts, a), append(plains, z), append(starts, lo)
	}
	o, po := latMergeRuns(rts, starts), latMergeRuns(plains, starts)
	o.plain = po.plain
	o.plainServerSpent = po.serverSpent
	o.plainServerUS, o.plainServerTop = po.serverUS, po.serverTop
	o.plainProcessUS = po.processUS
	o.published = min(o.published, po.published)
	o.load0, o.load1 = rts[0].load0, plains[n-1].load1
	if n%2 == 0 {
		o.load1 = rts[n-1].load1
	}
	o.alone, o.slices = true, n
	return o
}

// latMergeRuns is the outcome of runs of one consumer taken together,
// runs[i] having published the events from starts[i] on.
func latMergeRuns(runs []latOutcome, starts []int) latOutcome {
	o := runs[0]
	o.serverSpent = map[string]int64{}
	o.events = 0
	var trips, cmds, proc float64
	var rts, plains []latResult
	for _, r := range runs {
		o.events += r.events
		proc += r.processUS * float64(r.events)
		for k, v := range r.serverSpent {
			o.serverSpent[k] += v
		}
		trips += r.rtTrips * float64(r.events)
		cmds += r.rtCmds * float64(r.events)
		o.published = min(o.published, r.published)
		rts, plains = append(rts, r.rt), append(plains, r.plain)
	}
	if o.rtTrips >= 0 {
		o.rtTrips, o.rtCmds = trips/float64(o.events), cmds/float64(o.events)
	}
	o.processUS = proc / float64(o.events)
	o.serverUS, o.serverTop = latServerPerEvent(o.serverSpent, o.events)
	o.rt, o.plain = latMerge(rts, starts), latMerge(plains, starts)
	return o
}

func latRun(ctx context.Context, b *testing.B, srvs latServers, v latRedisVariant, sc latScenario, rate int, keys []string, drain time.Duration, who latWho) (o latOutcome) {
	b.Helper()
	admins := srvs.admins()
	for _, a := range admins {
		if err := a.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
	const category = "lat::order"
	const plainGroup = "plain.Consumer"
	l := broker.ProteanLayout
	events := len(keys)
	// Every stream the run touches, for the plain loop, which is told
	// them up front (its group made on each, MKSTREAM).
	var streams []string
	seen := map[string]bool{}
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			streams = append(streams, l.Stream(category, k))
		}
	}
	for p := 0; p < sc.keys; p++ {
		if k := rtKey(p); !seen[k] {
			seen[k] = true
			streams = append(streams, l.Stream(category, k))
		}
	}
	pipe := srvs.plainAdmin.Pipeline()
	if who.plain() {
		for _, s := range streams {
			pipe.XGroupCreateMkStream(ctx, s, plainGroup, "0")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	// The keys that exist before: one entry each, sequence numbers past
	// the run's, so neither recorder counts them.
	for _, a := range admins {
		pipe = a.Pipeline()
		for p := 0; p < sc.keys; p++ {
			pipe.SAdd(ctx, l.IndexKey(category), rtKey(p))
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: l.Stream(category, rtKey(p)), Values: []string{broker.DataField, latEnvelope(events+p, 0)}})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}

	rtRec, plainRec := newLatRecorder("runtime", events), newLatRecorder("plain", events)
	plainHandle := plainRec.record
	var (
		sub   *partitioned.Subscription
		calls *rtCalls
	)
	switch {
	case !who.runtime():
	case v.bin == "":
		h := runtime.HandlerFunc(func(_ context.Context, m runtime.Message) error {
			rtRec.record(m.Data)
			return nil
		})
		// PROTCTL_BENCH_LATENCY_SHARDS sets WaitShards (0: the default).
		shards := rtEnvInt(b, "PROTCTL_BENCH_LATENCY_SHARDS", 0)
		n, s, c, rc := rtNode(b, srvs.rt.Addr, "node-1", category, h, func(c *partitioned.Config) { c.WaitShards = shards }, nil)
		sub, calls = s, c
		defer rtStop(b, n, rc, time.Minute)
	default:
		v.handlers.rt.Store(rtRec)
		defer v.handlers.rt.Store(nil)
		defer latRunNode(b, v.bin, srvs.rt.URL(), category, v.handler.URL+"/runtime")()
	}
	switch {
	case !who.plain():
	case v.bin != "":
		// A process of its own, as the runtime's (latStartPlainProcess),
		// calling the handler over http. (Until the fourteenth pass, a
		// plain loop running alone here called the recorder directly.)
		v.handlers.plain.Store(plainRec)
		defer v.handlers.plain.Store(nil)
		defer latStartPlainProcess(b, srvs.plain.Addr, streams, plainGroup, v.handler.URL+"/plain")()
	default:
		defer latStartPlain(ctx, b, srvs.plain.Addr, streams, plainGroup, plainHandle)()
	}

	pre := int64(sc.keys)
	// done says whether every consumer of the run handled n events.
	done := func(rtN, plainN int64) bool {
		return (!who.runtime() || rtRec.n.Load() >= rtN) && (!who.plain() || plainRec.n.Load() >= plainN)
	}
	testenv.EventuallyEvery(b, time.Minute, 10*time.Millisecond, "the existing keys handled", func() (bool, string) {
		return done(pre, pre), fmt.Sprintf("runtime %d, plain %d of %d", rtRec.n.Load(), plainRec.n.Load(), pre)
	})
	// Let the workers of the keys that exist settle (drain and wait).
	time.Sleep(time.Second)
	if sc.idle && who.runtime() {
		testenv.EventuallyEvery(b, time.Minute, 50*time.Millisecond, "the existing keys idle without a lease", func() (bool, string) {
			if sub != nil {
				st := sub.Status()
				return len(st.Held) == 0 && st.Counters[runtime.CounterWatched] == pre,
					fmt.Sprintf("%d held, %d watched", len(st.Held), st.Counters[runtime.CounterWatched])
			}
			pipe := srvs.rtAdmin.Pipeline()
			for p := 0; p < sc.keys; p++ {
				pipe.Exists(ctx, l.LeaseKey(rtGroup, rtKey(p)))
			}
			cmds, err := pipe.Exec(ctx)
			if err != nil {
				b.Fatal(err)
			}
			for i, c := range cmds {
				if c.(*redis.IntCmd).Val() != 0 {
					return false, fmt.Sprintf("%s still leased", rtKey(i))
				}
			}
			return true, ""
		})
	}
	o.rtTrips, o.rtCmds = -1, -1
	o.rate = rate
	o.load0 = loadAverage()
	b.ResetTimer()
	var pubs []*redis.Client
	for _, a := range admins {
		pub := redis.NewClient(&redis.Options{Addr: a.Options().Addr})
		defer pub.Close()
		pubs = append(pubs, pub)
	}
	// PROTCTL_BENCH_LATENCY_WARMUP: events of the scenario published at
	// the rate for that long first, not measured, so that the window
	// measures a flow the node is already in (new keys: the workers of
	// the warm-up's keys end as the window's begin, their stacks reused).
	// The plain loop reads the warm-up's events on the streams it was
	// told of (every scenario's but new's, whose warm-up keys are keys of
	// their own).
	var warmRT, warmPlain int64
	if warmup := rtEnvDuration(b, "PROTCTL_BENCH_LATENCY_WARMUP", 0); warmup > 0 {
		wrng := rand.New(rand.NewPCG(3, 4))
		warm := make([]string, int(float64(rate)*warmup.Seconds()))
		for i := range warm {
			if sc.keys == 0 {
				warm[i] = "w" + strconv.Itoa(i)
			} else {
				warm[i] = sc.key(i, wrng)
			}
			if seen[warm[i]] {
				warmPlain++
			}
		}
		warmRT = int64(len(warm))
		latPublishTo(ctx, b, pubs, category, warm, events+sc.keys, rate)
	}
	rtStats0, plainStats0 := latServerUS(ctx, b, srvs.rtAdmin), latServerUS(ctx, b, srvs.plainAdmin)
	var trips0, cmds0 int64
	if calls != nil {
		trips0, cmds0 = calls.trips.Load(), calls.n.Load()
	}
	cpu0 := rtProcessCPU()
	took := latPublishTo(ctx, b, pubs, category, keys, 0, rate)
	b.StopTimer()
	latHeapProfile(b, who)
	o.published = float64(events) / took.Seconds()
	deadline := time.Now().Add(drain)
	for time.Now().Before(deadline) && !done(pre+warmRT+int64(events), pre+warmPlain+int64(events)) {
		time.Sleep(10 * time.Millisecond)
	}
	o.events = events
	o.serverSpent = latServerSpent(rtStats0, latServerUS(ctx, b, srvs.rtAdmin))
	o.serverUS, o.serverTop = latServerPerEvent(o.serverSpent, events)
	if srvs.plain != srvs.rt {
		o.plainServerSpent = latServerSpent(plainStats0, latServerUS(ctx, b, srvs.plainAdmin))
		o.plainServerUS, o.plainServerTop = latServerPerEvent(o.plainServerSpent, events)
	}
	if calls != nil {
		o.rtTrips = float64(calls.trips.Load()-trips0) / float64(events)
		o.rtCmds = float64(calls.n.Load()-cmds0) / float64(events)
	}
	o.load1 = loadAverage()
	o.processUS = float64((rtProcessCPU() - cpu0).Microseconds()) / float64(events)
	if who.runtime() {
		o.rt = latResultOf(rtRec)
	}
	if who.plain() {
		o.plain = latResultOf(plainRec)
	}
	return o
}

// latHeapProfile writes, with PROTCTL_BENCH_LATENCY_HEAPPROFILE=path,
// the heap profile of this process as the window's last event is
// published, its node still running: what a node in the flow keeps live
// (inuse_space), which the collector marks at every cycle. A run with the
// runtime writes path.runtime, one of the plain loop alone path.plain
// (each slice overwrites the last).
func latHeapProfile(tb testing.TB, who latWho) {
	path := os.Getenv("PROTCTL_BENCH_LATENCY_HEAPPROFILE")
	if path == "" {
		return
	}
	if who.runtime() {
		path += ".runtime"
	} else {
		path += ".plain"
	}
	goruntime.GC() // the profile is as of the last collection
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		tb.Fatal(err)
	}
}

// latServerCPU is the key of latServerUS's reading of the server's
// main thread's CPU time (user and system).
const latServerCPU = "(cpu)"

// latServerUS is the server's time in commands so far, in µs, per
// command (INFO commandstats usec), and its main thread's CPU time
// under latServerCPU (INFO cpu).
func latServerUS(ctx context.Context, b *testing.B, c *redis.Client) map[string]int64 {
	info, err := c.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	us := map[string]int64{}
	for _, line := range strings.Split(info, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && (k == "used_cpu_user_main_thread" || k == "used_cpu_sys_main_thread") {
			secs, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu: %s: %v", line, err)
			}
			us[latServerCPU] += int64(secs * 1e6)
			continue
		}
		name, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, rest, _ := strings.Cut(name, ":")
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				us[name] += n
			}
		}
	}
	return us
}

// latServerSpent is the server's time between two latServerUS readings,
// by command and under latServerCPU.
func latServerSpent(before, after map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(after))
	for name, us := range after {
		if d := us - before[name]; d > 0 {
			out[name] = d
		}
	}
	return out
}

// latServerPerEvent is a latServerSpent's main thread's CPU time per
// event of events, and the three most expensive commands ("xreadgroup
// 120.5, xadd 20.1, ...", µs per event). Commandstats cannot give the
// total: a script's usec includes the calls it makes, which Redis also
// counts under their own names.
func latServerPerEvent(spentUS map[string]int64, events int) (cpu float64, top string) {
	type spent struct {
		name string
		us   int64
	}
	var all []spent
	for name, us := range spentUS {
		if name != latServerCPU {
			all = append(all, spent{name, us})
		}
	}
	slices.SortFunc(all, func(a, b spent) int { return int(b.us - a.us) })
	var parts []string
	for _, s := range all[:min(3, len(all))] {
		parts = append(parts, fmt.Sprintf("%s %.1f", s.name, float64(s.us)/float64(events)))
	}
	return float64(spentUS[latServerCPU]) / float64(events), strings.Join(parts, ", ")
}

// BenchmarkLatencyKafka measures produce-to-handler latency of the Kafka
// topic runtime (a Node with one topic.Consumer, stores in memory,
// 12 partitions on an in-process kfake) against a raw franz-go consumer
// of the same topic, both consuming the same records in the same run,
// at the rates of PROTCTL_BENCH_LATENCY_RATES for
// PROTCTL_BENCH_LATENCY_WINDOW (default 2s) each. Records go to 1,200
// aggregates in round robin; the producer lingers 0 (each record sent
// at once). Reported: p50/p99 of each (ms) and the ratio of the p99s
// (target <= 2).
func BenchmarkLatencyKafka(b *testing.B) {
	window := rtEnvDuration(b, "PROTCTL_BENCH_LATENCY_WINDOW", 2*time.Second)
	drain := rtEnvDuration(b, "PROTCTL_BENCH_LATENCY_DRAIN", 40*time.Second)
	for _, rate := range latRates(b) {
		b.Run(strconv.Itoa(rate), func(b *testing.B) {
			var rt, raw latResult
			for i := 0; i < b.N; i++ {
				events := max(1, int(float64(rate)*window.Seconds()))
				rt, raw = latKafkaRun(b, rate, events, drain)
			}
			ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
			b.ReportMetric(ms(rt.p50), "rt-p50-ms")
			b.ReportMetric(ms(rt.p99), "rt-p99-ms")
			b.ReportMetric(ms(raw.p50), "raw-p50-ms")
			b.ReportMetric(ms(raw.p99), "raw-p99-ms")
			if raw.p99 > 0 {
				b.ReportMetric(float64(rt.p99)/float64(raw.p99), "p99-ratio")
			}
			b.ReportMetric(float64(rt.missing), "rt-not-handled")
			b.Logf("kafka at %d/s: runtime %s; raw %s", rate, rt, raw)
		})
	}
}

func latKafkaRun(b *testing.B, rate, events int, drain time.Duration) (rt, raw latResult) {
	b.Helper()
	k := testenv.StartKafka(b, kPartitions, kTopic)
	rtRec, rawRec := newLatRecorder("runtime", events), newLatRecorder("raw", events)

	src, err := kafkasource.New(k.Brokers)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	mb := memorybroker.New()
	store := memstore.New(mb.Faults())
	ts, err := topic.New(topic.Config{
		Topic: kTopic,
		Subscriptions: []topic.Subscription{{Name: "bench.latency", Handler: runtime.HandlerFunc(
			func(_ context.Context, m runtime.Message) error {
				rtRec.record(m.Data)
				return nil
			})}},
		Source:      topic.Kafka(src),
		Leases:      mb,
		Checkpoints: store,
		Ledger:      store,
	})
	if err != nil {
		b.Fatal(err)
	}
	node, err := runtime.NewNode(runtime.NodeConfig{Service: "bench", NodeID: "n1", Membership: store}, ts)
	if err != nil {
		b.Fatal(err)
	}
	if err := node.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := node.Stop(ctx); err != nil {
			b.Error(err)
		}
	}()

	rawCl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumeTopics(kTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	var rwg sync.WaitGroup
	rwg.Add(1)
	go func() {
		defer rwg.Done()
		for rctx.Err() == nil {
			fs := rawCl.PollFetches(rctx)
			fs.EachRecord(func(r *kgo.Record) { rawRec.record(r.Value) })
		}
	}()
	defer func() { rcancel(); rwg.Wait(); rawCl.Close() }()

	prod := k.Client(b, kgo.ProducerLinger(0))
	ctx := context.Background()
	send := func(seq int) {
		agg := seq % kAggregates
		if seq < 0 {
			agg = -seq % kAggregates
		}
		key := "agg-" + strconv.Itoa(agg)
		r := &kgo.Record{Topic: kTopic, Partition: int32(agg % kPartitions), Key: []byte(key),
			Value:   []byte(latEnvelope(seq, time.Now().UnixNano())),
			Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(key + "-" + strconv.Itoa(seq))}}}
		prod.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
		})
	}
	// Warm up: one record per partition, seen by both, before the clock.
	for p := 0; p < kPartitions; p++ {
		send(-(p + 1))
	}
	testenv.EventuallyEvery(b, time.Minute, 10*time.Millisecond, "both consumers running", func() (bool, string) {
		rt, raw := rtRec.n.Load(), rawRec.n.Load()
		return rt >= kPartitions && raw >= kPartitions, fmt.Sprintf("runtime %d, raw %d of %d", rt, raw, kPartitions)
	})
	b.ResetTimer()
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := 0; i < events; {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		now := time.Now()
		for ; i < events && !start.Add(time.Duration(i)*interval).After(now); i++ {
			send(i)
		}
	}
	b.StopTimer()
	total := int64(kPartitions + events)
	deadline := time.Now().Add(drain)
	for time.Now().Before(deadline) && (rtRec.n.Load() < total || rawRec.n.Load() < total) {
		time.Sleep(10 * time.Millisecond)
	}
	return latResultOf(rtRec), latResultOf(rawRec)
}
