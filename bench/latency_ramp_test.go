package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
)

// rampSearch finds the highest rate a consumer keeps up with: doubling
// from a start rate until a rate fails (or halving until one passes),
// then bisecting between the highest rate that passed and the lowest
// that failed.
type rampSearch struct {
	good, bad int // highest rate kept up with, lowest not (0: none yet)
	bisects   int // bisection steps left
	min, max  int
	next      int
}

func newRampSearch(start, minRate, maxRate, bisects int) *rampSearch {
	return &rampSearch{next: start, min: minRate, max: maxRate, bisects: bisects}
}

// done says the search is over; good is then the answer (0: even min
// failed).
func (r *rampSearch) done() bool { return r.next == 0 }

// record takes the outcome of a probe at r.next and picks the next rate.
func (r *rampSearch) record(ok bool) {
	rate := r.next
	if ok {
		r.good = rate
	} else {
		r.bad = rate
	}
	switch {
	case r.bad == 0: // doubling
		if rate >= r.max {
			r.next = 0
			return
		}
		r.next = min(2*rate, r.max)
	case r.good == 0: // halving
		if rate <= r.min {
			r.next = 0
			return
		}
		r.next = max(rate/2, r.min)
	default: // bisecting
		mid := (r.good + r.bad) / 2
		if r.bisects == 0 || mid == r.good || mid == r.bad {
			r.next = 0
			return
		}
		r.bisects--
		r.next = mid
	}
}

// rampProbe is one probe: a consumer at one rate.
type rampProbe struct {
	rate      int
	published float64 // the rate the publisher reached
	backlog   int     // events not handled when the last one was published
	// early and late are the backlog's means over the window's second
	// and last quarters (sampled every 20ms): a consumer whose latency
	// swings by hundreds of milliseconds swings its backlog by as many
	// milliseconds of flow, and a verdict on two instants flipped with
	// them (the same tree judged at 44,000 and at 96,000/s).
	early, late float64
	res         latResult
	ok          bool
	// clientUS, serverUS and publisherUS are the CPU time the consumer's
	// process, the server and the publisher's process spent per event
	// published, over the window: where a consumer's limit is, when the
	// machine's cores are.
	clientUS, serverUS, publisherUS float64
	// readsPer and leasesPer are the runtime's fenced reads and leases
	// acquired per event, from the window's start until the consumer
	// finished (zero for the plain loop).
	readsPer, leasesPer float64
}

func (p rampProbe) String() string {
	verdict := "kept up"
	if !p.ok {
		verdict = "fell behind"
	}
	var steps string
	if p.readsPer > 0 {
		steps = fmt.Sprintf("; per event: %.2f reads, %.2f leases", p.readsPer, p.leasesPer)
	}
	return fmt.Sprintf("%d/s (published %.0f/s): backlog %.0f then %.0f (quarter means), %d at the end, %s; CPU per event: consumer %.1f µs, server %.1f µs, publisher %.1f µs%s; %s",
		p.rate, p.published, p.early, p.late, p.backlog, verdict, p.clientUS, p.serverUS, p.publisherUS, steps, p.res)
}

// BenchmarkSustainableRateRedis finds the highest rate at which the
// runtime (a Node at the production defaults, an in-process handler)
// keeps up, and the same for the plain XREADGROUP loop of
// BenchmarkLatencyRedis, each consuming alone (the two searches alternate
// probes, so that both see the same machine). The events go to 1,000
// keys that exist before and are idle (no lease): half of them to a key
// drawn uniformly, half Zipf-skewed (s=1.1), written as Protean writes
// them. A consumer keeps up at a rate when its backlog (events written
// and not handled, sampled every 20ms over the window,
// PROTCTL_BENCH_RAMP_WINDOW, default 4s) grew from its mean over the
// window's second quarter to its mean over the last by at most 2.5% of
// the flow over the half window between them (max(100, rate/20) events
// for 4 s; the flow is the rate the publisher reached, if lower), and its
// last quarter's mean is at most a second of flow: a
// consumer slower than the flow by 2.5% or more grows its backlog by
// more than that, and one that keeps up holds about its latency's worth,
// whatever the latency. When the publisher reaches less than 90% of the
// rate (it shares the machine with the consumer) and the consumer kept
// up, the rate it reached is the consumer's "at least", and the search
// ends there.
//
// The search doubles from PROTCTL_BENCH_RAMP_START (default 1000/s) up to
// PROTCTL_BENCH_RAMP_MAX (default 64000/s), then bisects
// PROTCTL_BENCH_RAMP_BISECTS times (default 4). A search that reaches
// the maximum, or whose publisher cannot reach a rate, stops there and
// says so. PROTCTL_BENCH_RAMP_ONLY=plain or =runtime runs one search
// alone (for a profile of one consumer). Reported: each consumer's
// highest rate and the ratio runtime/plain (target >= 0.8), with every
// probe in the log (and on stderr as it ends).
//
//	go test -run '^$' -bench BenchmarkSustainableRateRedis -benchtime 1x -timeout 30m ./bench/
func BenchmarkSustainableRateRedis(b *testing.B) {
	ctx := context.Background()
	srv := testenv.StartRedis(b)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	window := rtEnvDuration(b, "PROTCTL_BENCH_RAMP_WINDOW", 4*time.Second)
	start := rtEnvInt(b, "PROTCTL_BENCH_RAMP_START", 1000)
	maxRate := rtEnvInt(b, "PROTCTL_BENCH_RAMP_MAX", 64000)
	bisects := rtEnvInt(b, "PROTCTL_BENCH_RAMP_BISECTS", 4)
	for i := 0; i < b.N; i++ {
		load0 := loadAverage()
		searches := map[string]*rampSearch{
			"plain":   newRampSearch(start, 50, maxRate, bisects),
			"runtime": newRampSearch(start, 50, maxRate, bisects),
		}
		switch only := os.Getenv("PROTCTL_BENCH_RAMP_ONLY"); only {
		case "":
		case "plain", "runtime":
			for who, s := range searches {
				if who != only {
					s.next = 0
				}
			}
		default:
			b.Fatalf("PROTCTL_BENCH_RAMP_ONLY=%q: want plain or runtime", only)
		}
		capped := map[string]bool{}
		probes := map[string][]string{}
		rng := rand.New(rand.NewPCG(3, 4))
		for !searches["plain"].done() || !searches["runtime"].done() {
			for _, who := range []string{"plain", "runtime"} {
				s := searches[who]
				if s.done() {
					continue
				}
				p := rampRun(ctx, b, srv, admin, who == "runtime", s.next, window, rng)
				// Every probe on stderr as it ends (a benchmark's log
				// keeps its first 10 lines only).
				fmt.Fprintf(os.Stderr, "ramp: %s %s\n", who, p)
				verdict := "ok"
				if !p.ok {
					verdict = "behind"
				}
				probes[who] = append(probes[who], fmt.Sprintf("%d %s (p99 %.0f ms)", p.rate, verdict, float64(p.res.p99)/1e6))
				if p.published < 0.9*float64(p.rate) && p.ok {
					// The publisher (sharing the machine with the
					// consumer) could not go faster: the consumer kept up
					// with what it reached, its limit above is not known.
					capped[who] = true
					s.good = max(s.good, int(p.published))
					s.next = 0
					continue
				}
				s.record(p.ok)
			}
		}
		plain, rt := searches["plain"].good, searches["runtime"].good
		note := func(who string) string {
			switch {
			case capped[who]:
				return " (at least: the publisher could not go faster)"
			case searches[who].good >= maxRate:
				return " (at least: PROTCTL_BENCH_RAMP_MAX)"
			}
			return ""
		}
		ratio := 0.0
		if plain > 0 {
			ratio = float64(rt) / float64(plain)
		}
		verdict := "NOT met"
		if ratio >= 0.8 {
			verdict = "met"
		}
		b.ReportMetric(float64(plain), "plain-max/s")
		b.ReportMetric(float64(rt), "runtime-max/s")
		b.ReportMetric(ratio, "ratio")
		b.Logf("highest rate kept up with: plain %d/s%s, runtime %d/s%s; runtime/plain %.2f (target >= 0.8: %s); load average %s -> %s\n"+
			"  plain probes:   %s\n  runtime probes: %s",
			plain, note("plain"), rt, note("runtime"), ratio, verdict, load0, loadAverage(),
			strings.Join(probes["plain"], ", "), strings.Join(probes["runtime"], ", "))
	}
}

// rampRun runs one consumer alone at rate for window over the ramp's
// keys, and judges whether it kept up.
func rampRun(ctx context.Context, b *testing.B, srv *testenv.Redis, admin *redis.Client, useRuntime bool, rate int, window time.Duration, rng *rand.Rand) rampProbe {
	b.Helper()
	if err := admin.FlushAll(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	const (
		category   = "ramp::order"
		plainGroup = "plain.Consumer"
		nkeys      = 1000
	)
	l := broker.ProteanLayout
	events := max(1, int(float64(rate)*window.Seconds()))
	zipf := rand.NewZipf(rng, 1.1, 1, nkeys-1)
	keys := make([]string, events)
	for i := range keys {
		if rng.IntN(2) == 0 {
			keys[i] = rtKey(rng.IntN(nkeys))
		} else {
			keys[i] = rtKey(int(zipf.Uint64()))
		}
	}
	streams := make([]string, nkeys)
	pipe := admin.Pipeline()
	for p := range nkeys {
		streams[p] = l.Stream(category, rtKey(p))
		pipe.SAdd(ctx, l.IndexKey(category), rtKey(p))
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: streams[p], Values: []string{broker.DataField, latEnvelope(events+p, 0)}})
		if !useRuntime {
			pipe.XGroupCreate(ctx, streams[p], plainGroup, "0")
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	rec := newLatRecorder("runtime", events)
	// counters reads the runtime's counters (nil for the plain loop).
	var counters func() map[string]int64
	if useRuntime {
		h := runtime.HandlerFunc(func(_ context.Context, m runtime.Message) error {
			rec.record(m.Data)
			return nil
		})
		n, sub, _, rc := rtNode(b, srv.Addr, "node-1", category, h, nil, nil)
		defer rtStop(b, n, rc, time.Minute)
		counters = func() map[string]int64 { return sub.Status().Counters }
		testenv.EventuallyEvery(b, time.Minute, 10*time.Millisecond, "the existing keys handled", func() (bool, string) {
			n := rec.n.Load()
			return n >= nkeys, fmt.Sprintf("%d of %d handled", n, nkeys)
		})
		testenv.EventuallyEvery(b, time.Minute, 50*time.Millisecond, "the existing keys idle without a lease", func() (bool, string) {
			st := sub.Status()
			return len(st.Held) == 0 && st.Counters[runtime.CounterWatched] == nkeys,
				fmt.Sprintf("%d held, %d watched", len(st.Held), st.Counters[runtime.CounterWatched])
		})
	} else {
		defer latStartPlain(ctx, b, srv.Addr, streams, plainGroup, rec.record)()
		testenv.EventuallyEvery(b, time.Minute, 10*time.Millisecond, "the existing keys handled", func() (bool, string) {
			n := rec.n.Load()
			return n >= nkeys, fmt.Sprintf("%d of %d handled", n, nkeys)
		})
	}
	// The backlog (written, not handled), sampled every 20ms while the
	// publisher, in a process of its own (ramp_publisher_test.go),
	// writes. What it has sent is reported after each pipeline's reply:
	// the consumer may have handled some of those in flight.
	cpu0, srv0 := rtProcessCPU(), rtRedisCPU(ctx, b, admin)
	var c0 map[string]int64
	if counters != nil {
		c0 = counters()
	}
	pub := startRampPublisher(b, srv.Addr, category, keys, rate)
	type sample struct {
		at      time.Duration
		backlog int
	}
	samples := make(chan []sample, 1)
	published := make(chan struct{})
	go func() {
		var out []sample
		start := time.Now()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-published:
				samples <- out
				return
			case <-tick.C:
				out = append(out, sample{time.Since(start), max(0, int(pub.sent.Load())-int(rec.n.Load()-nkeys))})
			}
		}
	}()
	pub.wait(b)
	close(published)
	cpu1, srv1 := rtProcessCPU(), rtRedisCPU(ctx, b, admin)
	took := pub.took
	p := rampProbe{rate: rate, published: float64(events) / took.Seconds()}
	p.clientUS = float64((cpu1 - cpu0).Microseconds()) / float64(events)
	p.serverUS = float64((srv1 - srv0).Microseconds()) / float64(events)
	p.publisherUS = float64(pub.cpu.Microseconds()) / float64(events)
	p.backlog = events - int(rec.n.Load()-nkeys)
	// The quarters of the time the publisher took (the window, or more
	// when it fell behind).
	mean := func(ss []sample, from, to time.Duration) float64 {
		sum, n := 0, 0
		for _, s := range ss {
			if s.at >= from && s.at < to {
				sum += s.backlog
				n++
			}
		}
		if n == 0 {
			return 0
		}
		return float64(sum) / float64(n)
	}
	ss := <-samples
	p.early, p.late = mean(ss, took/4, took/2), mean(ss, 3*took/4, took+time.Second)
	grew := p.late - p.early
	// The flow is what the publisher reached: behind its schedule (the
	// consumer took the cores), it wrote less than the rate asked, and a
	// threshold on the rate asked let a backlog growing by 5% of the
	// flow pass.
	flow := min(float64(rate), p.published)
	p.ok = grew <= max(100, 0.025*flow*(took/2).Seconds()) && p.late <= flow
	// Let it finish (bounded), for its latency figures.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && rec.n.Load() < int64(nkeys+events) {
		time.Sleep(10 * time.Millisecond)
	}
	p.res = latResultOf(rec)
	if counters != nil {
		c1 := counters()
		per := func(name string) float64 { return float64(c1[name]-c0[name]) / float64(events) }
		p.readsPer, p.leasesPer = per(runtime.CounterReads), per(runtime.CounterAcquired)
	}
	return p
}
