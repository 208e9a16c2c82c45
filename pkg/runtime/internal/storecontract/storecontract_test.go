package storecontract_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/storecontract"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

// Both stores run these checks before any I/O; the conformance suite
// (storetest, cases_input.go) runs every call of both with bad input.
// This table pins which argument each check names first.
func TestChecksNameTheArgument(t *testing.T) {
	f := broker.Fence{LeaseKey: "l", Token: "n:1"}
	for _, c := range []struct {
		name string
		err  error
		arg  string
	}{
		{"service with a brace", storecontract.Service("op", "a{b"), "service"},
		{"reserved subscription", storecontract.Subscription("op", "__x__"), "subscription"},
		{"node", storecontract.Node("op", "svc", ""), "node"},
		{"ttl", storecontract.Heartbeat("op", runtime.NodeStatus{Service: "svc", Node: "n"}, 0), "ttl"},
		{"fence token", storecontract.Fence("op", broker.Fence{LeaseKey: "l"}), "fence token"},
		{"lease group", storecontract.Checkpoint("op", "", "sub", 0), "lease group"},
		{"partition", storecontract.Checkpoint("op", "g", "sub", -1), "partition"},
		{"next offset", storecontract.Save("op", f, "g", "sub", 0, -1), "next offset"},
		{"aggregate", storecontract.Entry("op", f, "sub", ""), "aggregate"},
		{"status", storecontract.SetStatus("op", f, "sub", "agg", "gone"), "status"},
		{"park status", storecontract.Park("op", f, ledger.Parked{Subscription: "sub", Aggregate: "agg", Status: "gone"}), "status"},
		{"lookup", storecontract.Aggregate("op", "", "agg"), "subscription"},
	} {
		var ia *broker.InvalidArgumentError
		if !errors.As(c.err, &ia) || ia.Arg != c.arg || ia.Op != "op" || !errors.Is(c.err, broker.ErrInvalidArgument) {
			t.Errorf("%s: %v, want an invalid %s", c.name, c.err, c.arg)
		}
	}
	for name, err := range map[string]error{
		"park with no status": storecontract.Park("op", f, ledger.Parked{Subscription: "sub", Aggregate: "agg"}),
		"heartbeat":           storecontract.Heartbeat("op", runtime.NodeStatus{Service: "svc", Node: "n"}, time.Second),
		"save":                storecontract.Save("op", f, "g", "sub", 3, 0),
	} {
		if err != nil {
			t.Errorf("%s refused: %v", name, err)
		}
	}
}

func TestParkDefaults(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := storecontract.ParkDefaults(ledger.Parked{Error: strings.Repeat("x", ledger.MaxErrorLen+10)}, func() time.Time { return now })
	if p.Status != ledger.StatusParked || !p.ParkedAt.Equal(now) || len(p.Error) > ledger.MaxErrorLen {
		t.Fatalf("defaults %+v", p)
	}
	set := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	p = storecontract.ParkDefaults(ledger.Parked{Status: ledger.StatusRetrying, ParkedAt: set}, func() time.Time { return now })
	if p.Status != ledger.StatusRetrying || !p.ParkedAt.Equal(set) {
		t.Fatalf("given values replaced: %+v", p)
	}
}

func TestEncodeStatusHasOneShape(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b, err := storecontract.EncodeStatus(runtime.NodeStatus{Service: "svc", Node: "n"}, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"backingOff":[]`, `"paused":[]`, `"throttled":[]`, `"2026-01-02T03:04:05Z"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	// The held partitions are a record of their own (decision 0051).
	held := []runtime.HeldPartition{{Subscription: "s", Partition: "p", Generation: 2}}
	b, err = storecontract.EncodeStatus(runtime.NodeStatus{Service: "svc", Node: "n", Held: held}, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `"held"`) {
		t.Errorf("the status record %s carries the held partitions", b)
	}
	empty, err := storecontract.EncodeHeld("t-1", nil)
	if err != nil || string(empty) != `{"tag":"t-1","held":[]}` {
		t.Errorf("held record of none: %s, %v", empty, err)
	}
	rec, err := storecontract.EncodeHeld("t-2", held)
	if err != nil || !strings.HasPrefix(string(rec), storecontract.HeldTagPrefix("t-2")) {
		t.Fatalf("held record %s, %v: want it to begin with %s", rec, err, storecontract.HeldTagPrefix("t-2"))
	}
	st, err := storecontract.DecodeStatus(b, true)
	if err != nil || st.Held == nil || len(st.Held) != 0 {
		t.Fatalf("decoded status %+v, %v: want Held empty before the held record", st, err)
	}
	if err := storecontract.DecodeHeld(&st, rec); err != nil || len(st.Held) != 1 || st.Held[0] != held[0] {
		t.Fatalf("decoded held %+v, %v: want %+v", st.Held, err, held)
	}
	if st, err := storecontract.DecodeStatus(b, false); err != nil || st.Held != nil {
		t.Fatalf("decoded without held: %+v, %v: want Held nil", st, err)
	}
}
