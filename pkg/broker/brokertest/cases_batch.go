package brokertest

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// leaseRequest asks for k's lease as o, with k's main and backfill lanes
// tailed and, at generation gen (0: none), k's main lane read.
func (s *Suite) leaseRequest(k, o string, gen int64) broker.LeaseRequest {
	return broker.LeaseRequest{
		LeaseKey: s.L.LeaseKey(group, k), GenerationKey: s.L.GenerationKey(group, k), Owner: o, TTL: long,
		Tails:            []string{s.stream(k), s.backfill(k)},
		ReadAtGeneration: gen, Group: group, Read: []string{s.stream(k)}, Count: 10,
	}
}

// indexChecking returns s's broker as an IndexCheckingAcquirer that
// honours LeaseRequest.Index, or skips t.
func indexChecking(t *testing.T, s *Suite) broker.BatchAcquirer {
	t.Helper()
	ba := optional[broker.BatchAcquirer](t, s)
	if ic, ok := ba.(broker.IndexCheckingAcquirer); !ok || !ic.AcquireChecksIndex(cat) {
		t.Skip("the adapter does not check the index with an acquisition here")
	}
	return ba
}

var batchCases = []Case{
	{"BatchReadsAreEachFenced", func(t *testing.T, s *Suite) {
		br := optional[broker.BatchReader](t, s)
		keys := []string{"b-1", "b-2", "b-3"}
		pub := map[string][]string{}
		var leases []broker.Lease
		for _, k := range keys {
			pub[k] = s.publish(t, k, "", 3)
			ttl := long
			if k == "b-2" {
				ttl = 50 * time.Millisecond
			}
			leases = append(leases, s.acquire(t, k, owner, ttl))
		}
		s.Advance(120 * time.Millisecond) // b-2's owner paused past its TTL
		cur := s.acquire(t, "b-2", "node-b", long)
		reads := make([]broker.FencedRead, len(keys))
		for i, k := range keys {
			reads[i] = broker.FencedRead{Fence: leases[i].Fence, Stream: s.stream(k), Group: group, Count: 10, Mode: broker.ReadNew}
		}
		res := br.AckAndReadPartitionsFenced(s.Ctx, reads)
		if len(res) != len(reads) {
			t.Fatalf("%d results for %d reads", len(res), len(reads))
		}
		for i, k := range keys {
			if k == "b-2" {
				wantLeaseLost(t, "batch read", res[i].Err)
				continue
			}
			if res[i].Err != nil || !slices.Equal(ids(res[i].Messages), pub[k]) {
				t.Fatalf("batch read of %s = %v, %v; want %v", k, ids(res[i].Messages), res[i].Err, pub[k])
			}
		}
		// The stale read read nothing: the new owner reads every entry.
		if got := s.read(t, cur.Fence, s.stream("b-2"), 10, broker.ReadNew); !slices.Equal(ids(got), pub["b-2"]) {
			t.Fatalf("new entries of b-2 after the stale batch read = %v, want %v", ids(got), pub["b-2"])
		}
		// The others' acks ride on the next batch read, each under its
		// own fence; the stale one acks nothing.
		for i, k := range keys {
			reads[i].Ack = pub[k]
		}
		res = br.AckAndReadPartitionsFenced(s.Ctx, reads)
		for i, k := range keys {
			if k == "b-2" {
				wantLeaseLost(t, "batch ack and read", res[i].Err)
				continue
			}
			if res[i].Err != nil || len(res[i].Messages) != 0 {
				t.Fatalf("batch ack and read of %s = %v, %v; want nothing", k, ids(res[i].Messages), res[i].Err)
			}
			if p := s.read(t, leases[i].Fence, s.stream(k), 10, broker.ReadPending); len(p) != 0 {
				t.Fatalf("%s: %v still pending after the batch acked them", k, ids(p))
			}
		}
		if p := s.read(t, cur.Fence, s.stream("b-2"), 10, broker.ReadPending); !slices.Equal(ids(p), pub["b-2"]) {
			t.Fatalf("b-2 pending for its owner = %v, want %v (the stale ack must not touch them)", ids(p), pub["b-2"])
		}
	}},
	{"BatchReadRefusesBadArgumentsAlone", func(t *testing.T, s *Suite) {
		br := optional[broker.BatchReader](t, s)
		pub := s.publish(t, key, "", 2)
		l := s.acquire(t, key, owner, long)
		res := br.AckAndReadPartitionsFenced(s.Ctx, []broker.FencedRead{
			{Fence: l.Fence, Stream: s.stream(key), Group: group, Ack: []string{"not-an-id"}, Count: 10, Mode: broker.ReadNew},
			{Fence: l.Fence, Stream: s.stream(key), Group: group, Count: 10, Mode: broker.ReadNew},
		})
		var inv *broker.InvalidArgumentError
		if !errors.As(res[0].Err, &inv) {
			t.Fatalf("a read acking %q: err = %v, want an InvalidArgumentError", "not-an-id", res[0].Err)
		}
		if res[1].Err != nil || !slices.Equal(ids(res[1].Messages), pub) {
			t.Fatalf("the valid read beside it = %v, %v; want %v", ids(res[1].Messages), res[1].Err, pub)
		}
	}},
	{"BatchAcquireWithAnIndexCheckWritesNothingForAnUnindexedKey", func(t *testing.T, s *Suite) {
		ba := indexChecking(t, s)
		// "stray" has a stream (another tool's group made it) but is in no
		// index: an announced append to it must not make it a partition.
		const stray = "stray"
		if err := s.faults.CreateGroup(s.Ctx, s.stream(stray), "other.Consumer", "0"); err != nil {
			t.Fatal(err)
		}
		pub := s.publish(t, key, "", 2) // indexed by the publish
		reqs := []broker.LeaseRequest{s.leaseRequest(stray, owner, 1), s.leaseRequest(key, owner, 1), s.leaseRequest("never", owner, 1)}
		for i := range reqs {
			reqs[i].Index = s.L.IndexKey(cat)
		}
		reqs[0].Member, reqs[1].Member, reqs[2].Member = stray, key, "never"
		g := ba.AcquirePartitionLeases(s.Ctx, reqs)
		for _, i := range []int{0, 2} {
			if g[i].Err != nil || !g[i].NotIndexed || g[i].Acquired || g[i].Tails != nil || g[i].Read != nil {
				t.Fatalf("acquisition of unindexed %s = %+v, want NotIndexed and nothing else", reqs[i].Member, g[i])
			}
			for _, k := range []string{reqs[i].LeaseKey, reqs[i].GenerationKey, s.backfill(reqs[i].Member)} {
				if s.exists(t, k) {
					t.Fatalf("a refused acquisition of %s wrote %s", reqs[i].Member, k)
				}
			}
		}
		if s.exists(t, s.stream("never")) {
			t.Fatal("a refused acquisition created the stream of a key never written")
		}
		if c, err := s.faults.Consumers(s.Ctx, s.stream(stray), group); err != nil || len(c) != 0 {
			t.Fatalf("consumers of %s on the stray stream = %v, %v; want none", group, c, err)
		}
		if g[1].Err != nil || !g[1].Acquired || g[1].NotIndexed || g[1].Lease.Generation != 1 {
			t.Fatalf("acquisition of indexed %s = %+v", key, g[1])
		}
		if len(g[1].Read) != 1 || !slices.Equal(ids(g[1].Read[0].Messages), pub) {
			t.Fatalf("read with the checked lease = %+v, want %v", g[1].Read, pub)
		}
	}},
	{"BatchAcquireWithAnIndexCheckOfAHeldLease", func(t *testing.T, s *Suite) {
		ba := indexChecking(t, s)
		s.publish(t, key, "", 1)
		held := s.acquire(t, key, "node-b", long)
		if err := s.faults.CreateGroup(s.Ctx, s.stream("stray"), "other.Consumer", "0"); err != nil {
			t.Fatal(err)
		}
		// Indexed and held: not acquired, no error (the index passed).
		r := s.leaseRequest(key, owner, 2)
		r.Index, r.Member = s.L.IndexKey(cat), key
		g := ba.AcquirePartitionLeases(s.Ctx, []broker.LeaseRequest{r})[0]
		if g.Err != nil || g.Acquired || g.NotIndexed || g.Tails != nil || g.Read != nil {
			t.Fatalf("an indexed key's held lease: %+v, want not acquired, no error", g)
		}
		if v, _, _ := s.faults.GetString(s.Ctx, r.LeaseKey); v != held.Token {
			t.Fatalf("%s's lease = %q, want it left to %q", key, v, held.Token)
		}
		// Not indexed: NotIndexed whoever holds a lease under its name.
		r = s.leaseRequest("stray", owner, 1)
		r.Index, r.Member = s.L.IndexKey(cat), "stray"
		s.acquire(t, "stray", "node-b", long)
		g = ba.AcquirePartitionLeases(s.Ctx, []broker.LeaseRequest{r})[0]
		if g.Err != nil || !g.NotIndexed || g.Acquired {
			t.Fatalf("an unindexed key with a lease held: %+v, want NotIndexed", g)
		}
	}},
	{"BatchAcquireWithAWrongTypeIndexTakesNoLease", func(t *testing.T, s *Suite) {
		ba := indexChecking(t, s)
		idx := s.L.IndexKey(cat)
		if err := s.faults.PutString(s.Ctx, idx, "not-a-set"); err != nil {
			t.Fatal(err)
		}
		r := s.leaseRequest(key, owner, 1)
		r.Index, r.Member = idx, key
		g := ba.AcquirePartitionLeases(s.Ctx, []broker.LeaseRequest{r})[0]
		wantErrIs(t, "acquisition checked against a string index", g.Err, broker.ErrWrongType)
		if g.Acquired || g.NotIndexed || s.exists(t, r.LeaseKey) || s.exists(t, r.GenerationKey) {
			t.Fatalf("a refused acquisition: %+v, lease written %v", g, s.exists(t, r.LeaseKey))
		}
	}},
	{"BatchAcquireWithAnIndexItCannotCheckIsRefused", func(t *testing.T, s *Suite) {
		ba := optional[broker.BatchAcquirer](t, s)
		if ic, ok := ba.(broker.IndexCheckingAcquirer); !ok || ic.AcquireChecksIndex(cat) {
			t.Skip("the adapter checks the index with an acquisition here")
		}
		s.publish(t, key, "", 1)
		r := s.leaseRequest(key, owner, 1)
		r.Index, r.Member = s.L.IndexKey(cat), key
		g := ba.AcquirePartitionLeases(s.Ctx, []broker.LeaseRequest{r})[0]
		var inv *broker.InvalidArgumentError
		if !errors.As(g.Err, &inv) || g.Acquired || s.exists(t, r.LeaseKey) {
			t.Fatalf("an index the adapter cannot check: %+v, want an InvalidArgumentError and no lease", g)
		}
	}},
	{"BatchAcquireRefusesAMemberWithoutAnIndex", func(t *testing.T, s *Suite) {
		ba := optional[broker.BatchAcquirer](t, s)
		r := s.leaseRequest(key, owner, 1)
		r.Member = key
		g := ba.AcquirePartitionLeases(s.Ctx, []broker.LeaseRequest{r})[0]
		var inv *broker.InvalidArgumentError
		if !errors.As(g.Err, &inv) || g.Acquired || s.exists(t, r.LeaseKey) {
			t.Fatalf("a member without an index: %+v, want an InvalidArgumentError and no lease", g)
		}
	}},
	{"BatchAcquireTakesFreeLeasesOnly", func(t *testing.T, s *Suite) {
		ba := optional[broker.BatchAcquirer](t, s)
		held := s.acquire(t, "a-2", "node-b", long)
		g := ba.AcquirePartitionLeases(s.Ctx, []broker.LeaseRequest{s.leaseRequest("a-1", owner, 0), s.leaseRequest("a-2", owner, 0)})
		if g[0].Err != nil || !g[0].Acquired || g[0].Lease.Generation != 1 || g[0].Lease.Token != broker.FenceToken(owner, 1) {
			t.Fatalf("free lease a-1: %+v", g[0])
		}
		if g[1].Err != nil || g[1].Acquired || g[1].Tails != nil || g[1].Read != nil {
			t.Fatalf("held lease a-2: %+v, want not acquired, nothing else", g[1])
		}
		if v, _, _ := s.faults.GetString(s.Ctx, s.L.LeaseKey(group, "a-2")); v != held.Token {
			t.Fatalf("a-2's lease = %q, want it left to %q", v, held.Token)
		}
		if g[0].Read != nil {
			t.Fatalf("read without being asked: %+v", g[0].Read)
		}
	}},
	{"BatchAcquireReadsOnlyAtTheGenerationAsked", func(t *testing.T, s *Suite) {
		ba := optional[broker.BatchAcquirer](t, s)
		pub := s.publish(t, key, "", 3)
		g := ba.AcquirePartitionLeases(s.Ctx, []broker.LeaseRequest{s.leaseRequest(key, owner, 1)})[0]
		if g.Err != nil || !g.Acquired || g.Lease.Generation != 1 {
			t.Fatalf("acquire at generation 1: %+v", g)
		}
		if want := map[string]string{s.stream(key): pub[2], s.backfill(key): "0-0"}; !maps.Equal(g.Tails, want) {
			t.Fatalf("tails = %v, want %v", g.Tails, want)
		}
		if len(g.Read) != 1 || g.Read[0].Err != nil || !slices.Equal(ids(g.Read[0].Messages), pub) {
			t.Fatalf("read with the lease = %+v, want %v", g.Read, pub)
		}
		// Read under the new lease: pending for its token.
		if p := s.read(t, g.Lease.Fence, s.stream(key), 10, broker.ReadPending); !slices.Equal(ids(p), pub) {
			t.Fatalf("pending for the new lease = %v, want %v", ids(p), pub)
		}
		// An empty lane is not read: its stream and group are not made.
		if s.exists(t, s.backfill(key)) {
			t.Fatal("the empty backfill lane was created")
		}
		s.ack(t, g.Lease.Fence, s.stream(key), g.Read[0].Messages)
		if ok, err := s.B.ReleasePartitionLease(s.Ctx, g.Lease.Fence); err != nil || !ok {
			t.Fatalf("release: %v %v", ok, err)
		}
		more := s.publish(t, key, "", 2)
		// Asked at generation 2 but granted 3 (someone held 2 meanwhile):
		// nothing is read.
		other := s.acquire(t, key, "node-b", long)
		if ok, err := s.B.ReleasePartitionLease(s.Ctx, other.Fence); err != nil || !ok {
			t.Fatalf("release: %v %v", ok, err)
		}
		g = ba.AcquirePartitionLeases(s.Ctx, []broker.LeaseRequest{s.leaseRequest(key, owner, 2)})[0]
		if g.Err != nil || !g.Acquired || g.Lease.Generation != 3 || g.Read != nil {
			t.Fatalf("acquire asked to read at 2, granted %d: %+v", g.Lease.Generation, g)
		}
		if got := s.read(t, g.Lease.Fence, s.stream(key), 10, broker.ReadNew); !slices.Equal(ids(got), more) {
			t.Fatalf("new entries after an acquisition that did not read = %v, want %v", ids(got), more)
		}
	}},
	{"BatchReleasesAreEachFenced", func(t *testing.T, s *Suite) {
		br := optional[broker.BatchReleaser](t, s)
		// r-1: released, its empty consumer deleted; r-2: its owner paused
		// past its TTL and another node took it, so the stale release
		// changes nothing; r-3: a release with an empty stream name fails
		// alone; r-4: released with an entry still pending, whose
		// consumer stays for the next owner.
		for _, k := range []string{"r-1", "r-2", "r-3", "r-4"} {
			s.publish(t, k, "", 2)
		}
		l1 := s.acquire(t, "r-1", owner, long)
		s.drain(t, l1.Fence, s.stream("r-1"))
		l2 := s.acquire(t, "r-2", owner, 50*time.Millisecond)
		l3 := s.acquire(t, "r-3", owner, long)
		l4 := s.acquire(t, "r-4", owner, long)
		held := s.read(t, l4.Fence, s.stream("r-4"), 1, broker.ReadNew)
		s.Advance(120 * time.Millisecond)
		cur := s.acquire(t, "r-2", "node-b", long)
		got := br.ReleasePartitionLeasesConsumers(s.Ctx, []broker.LeaseRelease{
			{Fence: l1.Fence, Group: group, Streams: []string{s.stream("r-1"), s.backfill("r-1")}},
			{Fence: l2.Fence, Group: group, Streams: []string{s.stream("r-2")}},
			{Fence: l3.Fence, Group: group, Streams: []string{""}},
			{Fence: l4.Fence, Group: group, Streams: []string{s.stream("r-4")}},
		})
		if len(got) != 4 {
			t.Fatalf("%d results for 4 releases", len(got))
		}
		if !got[0].Released || got[0].Err != nil || s.exists(t, s.L.LeaseKey(group, "r-1")) {
			t.Fatalf("r-1's release = %+v (lease there: %v), want released", got[0], s.exists(t, s.L.LeaseKey(group, "r-1")))
		}
		if cs := s.consumers(t, s.stream("r-1")); len(cs) != 0 {
			t.Fatalf("r-1's consumers after its release = %v, want none", cs)
		}
		if got[1].Released || got[1].Err != nil {
			t.Fatalf("stale release of r-2 = %+v, want not released and no error", got[1])
		}
		if ok, err := s.B.RenewPartitionLease(s.Ctx, cur.Fence, long); err != nil || !ok {
			t.Fatalf("r-2's current owner's lease after a stale release: renew = %v, %v", ok, err)
		}
		var inv *broker.InvalidArgumentError
		if !errors.As(got[2].Err, &inv) || got[2].Released || !s.exists(t, s.L.LeaseKey(group, "r-3")) {
			t.Fatalf("release with an empty stream = %+v, want an InvalidArgumentError and the lease kept", got[2])
		}
		if ok, err := s.B.RenewPartitionLease(s.Ctx, l3.Fence, long); err != nil || !ok {
			t.Fatalf("r-3's lease after its invalid release: renew = %v, %v", ok, err)
		}
		if !got[3].Released || got[3].Err != nil {
			t.Fatalf("r-4's release = %+v, want released", got[3])
		}
		if cs := s.consumers(t, s.stream("r-4")); !maps.Equal(cs, map[string]int64{l4.Token: int64(len(held))}) {
			t.Fatalf("r-4's consumers after its release = %v, want %s with its pending entry", cs, l4.Token)
		}
	}},
	{"BatchAcquireOfAWrongTypeLaneTakesNoLease", func(t *testing.T, s *Suite) {
		ba := optional[broker.BatchAcquirer](t, s)
		if err := s.faults.PutString(s.Ctx, s.backfill(key), "not a stream"); err != nil {
			t.Fatal(err)
		}
		g := ba.AcquirePartitionLeases(s.Ctx, []broker.LeaseRequest{s.leaseRequest(key, owner, 1)})[0]
		var wt *broker.WrongTypeError
		if !errors.As(g.Err, &wt) || g.Acquired {
			t.Fatalf("acquire with a lane of the wrong type: %+v, want a WrongTypeError and no lease", g)
		}
		if s.exists(t, s.L.LeaseKey(group, key)) {
			t.Fatal("the lease was taken by a call that failed")
		}
	}},
}
