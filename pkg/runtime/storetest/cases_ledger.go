package storetest

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// kafkaEntry is a parked Kafka aggregate of sub on partition 0.
func kafkaEntry(subscription, aggregate string, at time.Time) ledger.Parked {
	return ledger.Parked{
		Subscription:  subscription,
		Source:        source.Kafka,
		Aggregate:     aggregate,
		Topic:         "orders",
		Partition:     "0",
		Position:      "1234",
		Error:         "handler: boom",
		Attempts:      3,
		ParkedAt:      at,
		LastAttemptAt: at,
		Status:        ledger.StatusParked,
		Owner:         "node-a",
		Generation:    1,
	}
}

func (s *Suite) park(t *testing.T, f broker.Fence, p ledger.Parked) {
	t.Helper()
	must(t, "park "+p.Aggregate, s.Store.Park(s.Ctx, f, p))
}

func (s *Suite) get(t *testing.T, subscription, aggregate string) ledger.Parked {
	t.Helper()
	p, err := s.Store.GetParked(s.Ctx, subscription, "", aggregate)
	must(t, "get "+aggregate, err)
	return p
}

func (s *Suite) list(t *testing.T, subscription string) []string {
	t.Helper()
	ps, err := s.Store.ListParked(s.Ctx, subscription)
	must(t, "list parked", err)
	var out []string
	for _, p := range ps {
		out = append(out, p.Subscription+"/"+p.Aggregate)
	}
	return out
}

func (s *Suite) wantNotParked(t *testing.T, what, subscription, aggregate string) {
	t.Helper()
	_, err := s.Store.GetParked(s.Ctx, subscription, "", aggregate)
	wantErrIs(t, what, err, ledger.ErrNotParked)
}

func wantList(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("%s: listed %v, want %v", what, got, want)
	}
}

var ledgerCases = []Case{
	{"ABinaryAggregateKeepsItsBytes", func(t *testing.T, s *Suite) {
		// A Kafka aggregate is the record's key or header bytes, which
		// need not be UTF-8 (a Confluent-serialized key begins with 0x00
		// and a schema id). JSON would read back U+FFFD in their place,
		// an aggregate the owner does not have.
		s.SetLease(t, lease0, tokenA)
		f := broker.Fence{LeaseKey: lease0, Token: tokenA}
		agg := "\x00\x00\x00\x00\x07\xc8k\xff"
		s.park(t, f, kafkaEntry(sub, agg, t0))
		if got := s.get(t, sub, agg); got.Aggregate != agg {
			t.Fatalf("GetParked: aggregate %q, want %q", got.Aggregate, agg)
		}
		must(t, "set status", s.Store.SetStatus(s.Ctx, f, sub, agg, ledger.StatusRetrying))
		must(t, "request retry", s.Store.RequestRetry(s.Ctx, sub, "0", agg, "ops"))
		ps, err := s.Store.ListParked(s.Ctx, sub)
		must(t, "list parked", err)
		if len(ps) != 1 || ps[0].Aggregate != agg || ps[0].Status != ledger.StatusRetrying || ps[0].Request == nil {
			t.Fatalf("ListParked after a status and a request: %+v, want the one entry of %q, retrying, with the request", ps, agg)
		}
		must(t, "resolve", s.Store.Resolve(s.Ctx, f, sub, agg))
		s.wantNotParked(t, "after the resolve", sub, agg)
	}},
	{"AnAggregateParkedOnTwoPartitionsHasTwoEntries", func(t *testing.T, s *Suite) {
		// A Kafka aggregate from a header or JSON path, or a key moved by
		// added partitions: each partition's entry is its own parked head.
		s.SetLease(t, lease0, tokenA)
		s.SetLease(t, lease1, tokenB)
		f0 := broker.Fence{LeaseKey: lease0, Token: tokenA}
		f1 := broker.Fence{LeaseKey: lease1, Token: tokenB}
		p0 := kafkaEntry(sub, "order-1", t0)
		p1 := kafkaEntry(sub, "order-1", t0.Add(time.Second))
		p1.Partition, p1.Position = "1", "77"
		s.park(t, f0, p0)
		s.park(t, f1, p1)

		ps, err := s.Store.ListParked(s.Ctx, sub)
		must(t, "list", err)
		if len(ps) != 2 || ps[0].Partition != "0" || ps[1].Partition != "1" {
			t.Fatalf("listed %+v, want order-1 on partitions 0 and 1", ps)
		}
		_, err = s.Store.GetParked(s.Ctx, sub, "", "order-1")
		wantErrIs(t, "get without a partition", err, ledger.ErrAmbiguousParked)
		var amb *ledger.AmbiguousParkedError
		if !errors.As(err, &amb) || strings.Join(amb.Partitions, ",") != "0,1" {
			t.Fatalf("ambiguous error %v, want one naming partitions 0 and 1", err)
		}
		wantErrIs(t, "retry request without a partition", s.Store.RequestRetry(s.Ctx, sub, "", "order-1", "ops"), ledger.ErrAmbiguousParked)
		for _, want := range []ledger.Parked{p0, p1} {
			got, err := s.Store.GetParked(s.Ctx, sub, want.Partition, "order-1")
			must(t, "get on partition "+want.Partition, err)
			if got.Position != want.Position {
				t.Fatalf("partition %s: position %s, want %s", want.Partition, got.Position, want.Position)
			}
		}
		_, err = s.Store.GetParked(s.Ctx, sub, "2", "order-1")
		wantErrIs(t, "get on a partition with no entry", err, ledger.ErrNotParked)

		// Each partition's owner edits and resolves its own entry only.
		must(t, "request retry on 0", s.Store.RequestRetry(s.Ctx, sub, "0", "order-1", "ops"))
		if got, _ := s.Store.GetParked(s.Ctx, sub, "1", "order-1"); got.Request != nil || got.Status != ledger.StatusParked {
			t.Fatalf("partition 1's entry %+v changed by a request on partition 0", got)
		}
		must(t, "set status on 1", s.Store.SetStatus(s.Ctx, f1, sub, "order-1", ledger.StatusRetrying))
		if got, _ := s.Store.GetParked(s.Ctx, sub, "0", "order-1"); got.Request == nil {
			t.Fatalf("partition 0's request %+v cleared by partition 1's owner", got)
		}
		must(t, "resolve on 1", s.Store.Resolve(s.Ctx, f1, sub, "order-1"))
		got := s.get(t, sub, "order-1") // the only one left
		if got.Partition != "0" {
			t.Fatalf("after resolving partition 1: %+v, want partition 0's entry", got)
		}
		wantList(t, "list after resolving partition 1", s.list(t, sub), sub+"/order-1")
		must(t, "resolve on 0", s.Store.Resolve(s.Ctx, f0, sub, "order-1"))
		s.wantNotParked(t, "get after both resolved", sub, "order-1")
		wantList(t, "list after both resolved", s.list(t, sub))
	}},
	{"AParkAfterAResolveOfTheSameEntryIsListed", func(t *testing.T, s *Suite) {
		// Park, resolve and park again the same (partition, aggregate),
		// then a late resolve of the first park by its stale owner: the
		// second park stays listed.
		s.SetLease(t, lease0, tokenA)
		fa := broker.Fence{LeaseKey: lease0, Token: tokenA}
		s.park(t, fa, kafkaEntry(sub, "order-1", t0))
		must(t, "resolve", s.Store.Resolve(s.Ctx, fa, sub, "order-1"))
		s.SetLease(t, lease0, tokenB)
		fb := broker.Fence{LeaseKey: lease0, Token: tokenB}
		p := kafkaEntry(sub, "order-1", t0.Add(time.Second))
		p.Position = "1300"
		s.park(t, fb, p)
		wantErrIs(t, "stale resolve", s.Store.Resolve(s.Ctx, fa, sub, "order-1"), broker.ErrLeaseLost)
		if got := s.get(t, sub, "order-1"); got.Position != "1300" {
			t.Fatalf("got %+v, want the second park at 1300", got)
		}
		wantList(t, "list", s.list(t, sub), sub+"/order-1")
	}},
	{"ParkedEntriesAreListedOldestFirstAndRoundTrip", func(t *testing.T, s *Suite) {
		if got := s.list(t, ""); len(got) != 0 {
			t.Fatalf("an empty ledger lists %v", got)
		}
		s.SetLease(t, lease0, tokenA)
		s.SetLease(t, redisLease, tokenB)
		f := broker.Fence{LeaseKey: lease0, Token: tokenA}
		newer := kafkaEntry(sub, "order-2", t0.Add(time.Minute))
		older := kafkaEntry(sub, "order-1", t0)
		s.park(t, f, newer)
		s.park(t, f, older)
		redisEntry := ledger.Parked{
			Subscription: "app.handlers.Projector", Source: source.Redis, Aggregate: "o-1",
			Category: "shop::order", Partition: "o-1", Position: "1700000000000-0", Stream: "shop::order:{o-1}",
			Error: "boom", Attempts: 1, ParkedAt: t0.Add(30 * time.Second), Status: ledger.StatusParked,
		}
		s.park(t, broker.Fence{LeaseKey: redisLease, Token: tokenB}, redisEntry)

		if got, want := jsonOf(t, s.get(t, sub, "order-2")), jsonOf(t, newer); got != want {
			t.Fatalf("get order-2:\n got %s\nwant %s", got, want)
		}
		wantList(t, "list of sub", s.list(t, sub), sub+"/order-1", sub+"/order-2")
		wantList(t, "list of all", s.list(t, ""), sub+"/order-1", "app.handlers.Projector/o-1", sub+"/order-2")
		wantList(t, "list of a subscription with no entries", s.list(t, sub2))
		s.wantNotParked(t, "get of an aggregate never parked", sub, "order-9")
		s.wantNotParked(t, "get in another subscription", sub2, "order-1")
	}},
	{"ParkReplacesTheEntry", func(t *testing.T, s *Suite) {
		s.SetLease(t, lease0, tokenA)
		f := broker.Fence{LeaseKey: lease0, Token: tokenA}
		p := kafkaEntry(sub, "order-1", t0)
		s.park(t, f, p)
		p.Attempts, p.Position = 5, "1240"
		s.park(t, f, p)
		got := s.get(t, sub, "order-1")
		if got.Attempts != 5 || got.Position != "1240" {
			t.Fatalf("after a second park: attempts %d position %s, want 5 and 1240", got.Attempts, got.Position)
		}
		wantList(t, "list", s.list(t, sub), sub+"/order-1")
	}},
	{"ParkFillsInStatusAndParkedAt", func(t *testing.T, s *Suite) {
		s.SetLease(t, lease0, tokenA)
		p := kafkaEntry(sub, "order-1", time.Time{})
		p.Status = ""
		s.park(t, broker.Fence{LeaseKey: lease0, Token: tokenA}, p)
		got := s.get(t, sub, "order-1")
		if got.Status != ledger.StatusParked || got.ParkedAt.IsZero() {
			t.Fatalf("status %q parkedAt %v: want parked and a time", got.Status, got.ParkedAt)
		}
	}},
	{"SubscriptionsSharingALeaseKeepSeparateEntries", func(t *testing.T, s *Suite) {
		// A Kafka lease is shared by every subscription of the topic.
		s.SetLease(t, lease0, tokenA)
		f := broker.Fence{LeaseKey: lease0, Token: tokenA}
		a := kafkaEntry(sub, "order-1", t0)
		b := kafkaEntry(sub2, "order-1", t0.Add(time.Second))
		b.Error = "audit failed"
		s.park(t, f, a)
		s.park(t, f, b)
		// Names that would spell the same key joined by ':'.
		c := kafkaEntry("x:y", "z", t0.Add(2*time.Second))
		d := kafkaEntry("x", "y:z", t0.Add(3*time.Second))
		s.park(t, f, c)
		s.park(t, f, d)
		if got := s.get(t, sub, "order-1").Error; got != a.Error {
			t.Fatalf("%s's entry has error %q, want %q", sub, got, a.Error)
		}
		if got := s.get(t, sub2, "order-1").Error; got != b.Error {
			t.Fatalf("%s's entry has error %q, want %q", sub2, got, b.Error)
		}
		if got := s.get(t, "x", "y:z").ParkedAt; !got.Equal(d.ParkedAt) {
			t.Fatalf("x / y:z parked at %v, want %v", got, d.ParkedAt)
		}
		must(t, "resolve", s.Store.Resolve(s.Ctx, f, sub, "order-1"))
		s.get(t, sub2, "order-1")
		s.get(t, "x:y", "z")
	}},
	{"ErrorTextIsCutTo1KiB", func(t *testing.T, s *Suite) {
		s.SetLease(t, lease0, tokenA)
		p := kafkaEntry(sub, "order-1", t0)
		p.Error = strings.Repeat("é", 3000) // 6000 bytes, 2-byte runes
		s.park(t, broker.Fence{LeaseKey: lease0, Token: tokenA}, p)
		got := s.get(t, sub, "order-1").Error
		if len(got) > ledger.MaxErrorLen || !utf8.ValidString(got) || got != ledger.TruncateError(p.Error) {
			t.Fatalf("stored error is %d bytes (valid UTF-8: %v), want TruncateError's %d", len(got), utf8.ValidString(got), len(ledger.TruncateError(p.Error)))
		}
	}},
	{"StaleParkIsRefusedAndWritesNothing", func(t *testing.T, s *Suite) {
		a := broker.Fence{LeaseKey: lease0, Token: tokenA}
		err := s.Store.Park(s.Ctx, a, kafkaEntry(sub, "order-1", t0))
		wantLeaseLost(t, "park without a lease", "park", err, a)
		s.SetLease(t, lease0, tokenB)
		err = s.Store.Park(s.Ctx, a, kafkaEntry(sub, "order-1", t0))
		wantLeaseLost(t, "park by a superseded owner", "park", err, a)
		s.wantNotParked(t, "get after refused parks", sub, "order-1")
		wantList(t, "list after refused parks", s.list(t, sub))
		wantList(t, "list all after refused parks", s.list(t, ""))
		// A refused replace keeps the entry as it was.
		b := broker.Fence{LeaseKey: lease0, Token: tokenB}
		s.park(t, b, kafkaEntry(sub, "order-1", t0))
		p := kafkaEntry(sub, "order-1", t0)
		p.Attempts = 99
		err = s.Store.Park(s.Ctx, a, p)
		wantLeaseLost(t, "replace by a superseded owner", "park", err, a)
		if got := s.get(t, sub, "order-1").Attempts; got != 3 {
			t.Fatalf("a refused replace changed attempts to %d", got)
		}
	}},
	{"SetStatusIsFencedAndClearsTheRequest", func(t *testing.T, s *Suite) {
		s.SetLease(t, lease0, tokenA)
		a := broker.Fence{LeaseKey: lease0, Token: tokenA}
		s.park(t, a, kafkaEntry(sub, "order-1", t0))
		must(t, "request retry", s.Store.RequestRetry(s.Ctx, sub, "", "order-1", "ops"))
		must(t, "set status", s.Store.SetStatus(s.Ctx, a, sub, "order-1", ledger.StatusRetrying))
		got := s.get(t, sub, "order-1")
		if got.Status != ledger.StatusRetrying || got.Request != nil {
			t.Fatalf("after set status: status %q request %+v, want retrying and no request", got.Status, got.Request)
		}
		// The rest of the entry is kept.
		want := kafkaEntry(sub, "order-1", t0)
		want.Status = ledger.StatusRetrying
		if jsonOf(t, got) != jsonOf(t, want) {
			t.Fatalf("set status changed more than the status:\n got %s\nwant %s", jsonOf(t, got), jsonOf(t, want))
		}
		s.SetLease(t, lease0, tokenB)
		err := s.Store.SetStatus(s.Ctx, a, sub, "order-1", ledger.StatusUnrecoverable)
		wantLeaseLost(t, "set status by a superseded owner", "set status", err, a)
		if got := s.get(t, sub, "order-1").Status; got != ledger.StatusRetrying {
			t.Fatalf("a refused set status changed the status to %q", got)
		}
		b := broker.Fence{LeaseKey: lease0, Token: tokenB}
		err = s.Store.SetStatus(s.Ctx, b, sub, "order-9", ledger.StatusParked)
		wantErrIs(t, "set status of a missing entry", err, ledger.ErrNotParked)
		// Under another lease the entry is not there either.
		s.SetLease(t, lease1, tokenA)
		err = s.Store.SetStatus(s.Ctx, broker.Fence{LeaseKey: lease1, Token: tokenA}, sub, "order-1", ledger.StatusParked)
		wantErrIs(t, "set status under another lease", err, ledger.ErrNotParked)
	}},
	{"ResolveIsFenced", func(t *testing.T, s *Suite) {
		s.SetLease(t, lease0, tokenA)
		a := broker.Fence{LeaseKey: lease0, Token: tokenA}
		s.park(t, a, kafkaEntry(sub, "order-1", t0))
		s.park(t, a, kafkaEntry(sub, "order-2", t0))
		s.SetLease(t, lease0, tokenB)
		err := s.Store.Resolve(s.Ctx, a, sub, "order-1")
		wantLeaseLost(t, "resolve by a superseded owner", "resolve", err, a)
		s.DropLease(t, lease0)
		err = s.Store.Resolve(s.Ctx, a, sub, "order-1")
		wantLeaseLost(t, "resolve on an expired lease", "resolve", err, a)
		s.get(t, sub, "order-1")
		wantList(t, "after refused resolves", s.list(t, sub), sub+"/order-1", sub+"/order-2")

		s.SetLease(t, lease0, tokenB)
		b := broker.Fence{LeaseKey: lease0, Token: tokenB}
		must(t, "resolve", s.Store.Resolve(s.Ctx, b, sub, "order-1"))
		s.wantNotParked(t, "get after resolve", sub, "order-1")
		wantList(t, "after resolve", s.list(t, sub), sub+"/order-2")
		wantList(t, "all after resolve", s.list(t, ""), sub+"/order-2")
		must(t, "resolve again", s.Store.Resolve(s.Ctx, b, sub, "order-1"))
		// Parking again after a resolve works.
		s.park(t, b, kafkaEntry(sub, "order-1", t0.Add(time.Hour)))
		wantList(t, "after a new park", s.list(t, sub), sub+"/order-2", sub+"/order-1")
	}},
	{"ManyEntriesListInOrder", func(t *testing.T, s *Suite) {
		s.SetLease(t, lease0, tokenA)
		f := broker.Fence{LeaseKey: lease0, Token: tokenA}
		var want []string
		for i := range 50 {
			agg := "order-" + strconv.Itoa(i)
			s.park(t, f, kafkaEntry(sub, agg, t0.Add(time.Duration(50-i)*time.Second)))
			want = append([]string{sub + "/" + agg}, want...)
		}
		wantList(t, "50 entries", s.list(t, sub), want...)
	}},
}
