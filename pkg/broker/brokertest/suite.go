package brokertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// Case is one named conformance check.
type Case struct {
	Name string
	Run  func(t *testing.T, s *Suite)
}

// Suite is what a case works with: the target and helpers bound to it.
type Suite struct {
	Target
	B      broker.PartitionedBroker
	L      broker.Layout
	Ctx    context.Context
	faults Faults
}

// Cases returns every conformance case of a broker with
// StreamPartitioning, in the order Run runs them.
func Cases() []Case {
	var all []Case
	for _, group := range [][]Case{indexCases, leaseCases, consumeCases, consumerCases, ackReadCases, batchCases, waitReadCases, reapCases, reapLeaseCases, trimCases, inputCases, raceCases} {
		all = append(all, group...)
	}
	return all
}

// ReplicaCases returns the cases of a broker that waits for replica
// acknowledgements (Target.Unreplicated); Run adds them for a target that
// has one.
func ReplicaCases() []Case { return append([]Case(nil), replicaCases...) }

// Run runs the conformance suite: each case gets a fresh Target from
// newTarget. A broker whose Capabilities lack StreamPartitioning is held
// to the capability gate instead: every partitioning method must fail with
// broker.ErrPartitioningUnsupported and name itself.
func Run(t *testing.T, newTarget Factory) {
	t.Helper()
	probe := newTarget(t)
	if !probe.Broker.Capabilities().Has(broker.StreamPartitioning) {
		t.Run("CapabilityGate", func(t *testing.T) { runCapabilityGate(t, newTarget(t)) })
		return
	}
	t.Run("CapabilitiesAdvertisePartitioning", func(t *testing.T) {
		c := newTarget(t).Broker.Capabilities()
		for _, want := range []broker.Capabilities{broker.StreamPartitioning} {
			if !c.Has(want) {
				t.Fatalf("capabilities %s lack %s", c, want)
			}
		}
	})
	cases := Cases()
	if probe.Unreplicated != nil {
		cases = append(cases, ReplicaCases()...)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			target := newTarget(t)
			if target.Advance == nil || target.Faults == nil {
				t.Fatal("brokertest: Target needs Advance and Faults")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c.Run(t, &Suite{Target: target, B: target.Broker, L: target.Broker.Layout(), Ctx: ctx, faults: target.Faults})
		})
	}
}

// Names used by the cases.
const (
	cat   = "shop::order"
	key   = "o-1"
	group = "app.handlers.Projector"
	owner = "node-a"
	long  = 30 * time.Second
)

func (s *Suite) stream(k string) string { return s.L.Stream(cat, k) }

func (s *Suite) backfill(k string) string {
	return s.L.LaneStream(cat, k, broker.DefaultBackfillSuffix)
}

// publish appends n entries "<k>-<i>" to k's lane and returns their ids.
func (s *Suite) publish(t *testing.T, k, lane string, n int) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for i := 0; i < n; i++ {
		id, err := s.B.PublishPartitioned(s.Ctx, cat, k, lane, payload(k, i))
		if err != nil {
			t.Fatalf("publish %s #%d: %v", k, i, err)
		}
		ids = append(ids, id)
	}
	return ids
}

func payload(k string, i int) []byte {
	return fmt.Appendf(nil, `{"data":{"key":%q,"seq":%d},"metadata":{"headers":{"id":"%s-%d","type":"Test"}}}`, k, i, k, i)
}

// acquire takes k's lease for group as o, failing t when it is not free.
func (s *Suite) acquire(t *testing.T, k, o string, ttl time.Duration) broker.Lease {
	t.Helper()
	l, ok, err := s.B.AcquirePartitionLease(s.Ctx, s.L.LeaseKey(group, k), s.L.GenerationKey(group, k), o, ttl)
	if err != nil {
		t.Fatalf("acquire %s by %s: %v", k, o, err)
	}
	if !ok {
		t.Fatalf("acquire %s by %s: lease not free", k, o)
	}
	return l
}

func (s *Suite) tryAcquire(t *testing.T, k, o string, ttl time.Duration) (broker.Lease, bool) {
	t.Helper()
	l, ok, err := s.B.AcquirePartitionLease(s.Ctx, s.L.LeaseKey(group, k), s.L.GenerationKey(group, k), o, ttl)
	if err != nil {
		t.Fatalf("acquire %s by %s: %v", k, o, err)
	}
	return l, ok
}

func (s *Suite) read(t *testing.T, f broker.Fence, stream string, count int64, mode broker.ReadMode) []broker.Message {
	t.Helper()
	msgs, err := s.B.ReadPartitionFenced(s.Ctx, f, stream, group, count, mode)
	if err != nil {
		t.Fatalf("fenced read of %s: %v", stream, err)
	}
	return msgs
}

func (s *Suite) ack(t *testing.T, f broker.Fence, stream string, msgs []broker.Message) {
	t.Helper()
	if len(msgs) == 0 {
		return
	}
	n, err := s.B.AckPartitionFenced(s.Ctx, f, stream, group, ids(msgs)...)
	if err != nil {
		t.Fatalf("fenced ack on %s: %v", stream, err)
	}
	if n != int64(len(msgs)) {
		t.Fatalf("ack of %d ids acknowledged %d", len(msgs), n)
	}
}

// drain reads and acks everything k's stream holds for group.
func (s *Suite) drain(t *testing.T, f broker.Fence, stream string) []broker.Message {
	t.Helper()
	var all []broker.Message
	for {
		msgs := s.read(t, f, stream, 50, broker.ReadPendingThenNew)
		if len(msgs) == 0 {
			return all
		}
		s.ack(t, f, stream, msgs)
		all = append(all, msgs...)
	}
}

func (s *Suite) keys(t *testing.T) []string {
	t.Helper()
	ks, err := s.B.PartitionKeys(s.Ctx, cat)
	if err != nil {
		t.Fatalf("partition keys: %v", err)
	}
	slices.Sort(ks)
	return ks
}

func (s *Suite) streamLen(t *testing.T, stream string) int64 {
	t.Helper()
	n, err := s.faults.StreamLen(s.Ctx, stream)
	if err != nil {
		t.Fatalf("stream length of %s: %v", stream, err)
	}
	return n
}

func (s *Suite) streamIDs(t *testing.T, stream string) []string {
	t.Helper()
	ids, err := s.faults.StreamIDs(s.Ctx, stream)
	if err != nil {
		t.Fatalf("stream ids of %s: %v", stream, err)
	}
	return ids
}

func (s *Suite) exists(t *testing.T, k string) bool {
	t.Helper()
	ok, err := s.faults.Exists(s.Ctx, k)
	if err != nil {
		t.Fatalf("exists %s: %v", k, err)
	}
	return ok
}

func ids(msgs []broker.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

func wantLeaseLost(t *testing.T, op string, err error) {
	t.Helper()
	if !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("%s with a stale token: err = %v, want ErrLeaseLost", op, err)
	}
	var lle *broker.LeaseLostError
	if !errors.As(err, &lle) {
		t.Fatalf("%s: err %T does not carry *LeaseLostError", op, err)
	}
	if lle.Token == "" || lle.LeaseKey == "" {
		t.Fatalf("%s: LeaseLostError lacks token or lease key: %+v", op, lle)
	}
}

func wantErrIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: err = %v, want %v", what, err, target)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// optional returns s.B as the optional capability T, skipping the case
// when the adapter does not offer it: an adapter is held only to the
// cases of what it implements.
func optional[T any](t *testing.T, s *Suite) T {
	t.Helper()
	c, ok := s.B.(T)
	if !ok {
		t.Skipf("the adapter does not implement %s", strings.TrimPrefix(fmt.Sprintf("%T", (*T)(nil)), "*"))
	}
	return c
}
