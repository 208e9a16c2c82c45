package storetest

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// short is a TTL the cases let run out; Advance waits for it on a real
// server, so it is small.
const short = 150 * time.Millisecond

func (s *Suite) heartbeat(t *testing.T, node string, ttl time.Duration) runtime.NodeStatus {
	t.Helper()
	st := runtime.NodeStatus{
		Service:    service,
		Node:       node,
		AdminAddr:  "127.0.0.1:7070",
		JoinState:  runtime.JoinJoined,
		StartedAt:  t0,
		LastSeen:   t0.Add(time.Second),
		Held:       []runtime.HeldPartition{{Subscription: sub, Source: source.Kafka, Topic: "orders", Partition: "3", Generation: 7}},
		BackingOff: []string{"orders/1"},
		Paused:     []string{"orders/2"},
		Throttled:  []string{},
		Parked:     2,
		Counters:   map[string]int64{"processed": 10},
	}
	must(t, "heartbeat "+node, s.Store.Heartbeat(s.Ctx, st, ttl))
	return st
}

func (s *Suite) memberNames(t *testing.T, svc string) []string {
	t.Helper()
	ms, err := s.Store.Members(s.Ctx, svc)
	must(t, "members", err)
	var names []string
	for _, m := range ms {
		names = append(names, m.Node)
	}
	return names
}

func wantNames(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: members %v, want %v", what, got, want)
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	must(t, "marshal", err)
	return string(b)
}

var membershipCases = []Case{
	{"MembersAreSortedByNodeAndCarryTheirStatus", func(t *testing.T, s *Suite) {
		if names := s.memberNames(t, service); len(names) != 0 {
			t.Fatalf("an empty service has members %v", names)
		}
		var sent []runtime.NodeStatus
		for _, n := range []string{"node-c", "node-a", "node-b"} {
			sent = append(sent, s.heartbeat(t, n, long))
		}
		ms, err := s.Store.Members(s.Ctx, service)
		must(t, "members", err)
		if len(ms) != 3 {
			t.Fatalf("got %d members, want 3", len(ms))
		}
		wantNames(t, "after three heartbeats", s.memberNames(t, service), "node-a", "node-b", "node-c")
		// The status record round-trips (node-a was sent second).
		if got, want := jsonOf(t, ms[0]), jsonOf(t, sent[1]); got != want {
			t.Fatalf("status of node-a:\n got %s\nwant %s", got, want)
		}
	}},
	{"HeartbeatReplacesTheStatus", func(t *testing.T, s *Suite) {
		s.heartbeat(t, "node-a", long)
		st := runtime.NodeStatus{Service: service, Node: "node-a", JoinState: runtime.JoinLeaving, LastSeen: t0}
		must(t, "heartbeat", s.Store.Heartbeat(s.Ctx, st, long))
		ms, err := s.Store.Members(s.Ctx, service)
		must(t, "members", err)
		if len(ms) != 1 || ms[0].JoinState != runtime.JoinLeaving {
			t.Fatalf("members %+v, want node-a leaving", ms)
		}
		// Nil lists come back empty, never null, so JSON readers see one shape.
		if ms[0].Held == nil || ms[0].BackingOff == nil || ms[0].Paused == nil || ms[0].Throttled == nil {
			t.Fatalf("nil lists came back nil: %+v", ms[0])
		}
		if !ms[0].LastSeen.Equal(t0) {
			t.Fatalf("LastSeen %v, want %v", ms[0].LastSeen, t0)
		}
	}},
	{"ZeroLastSeenIsFilledIn", func(t *testing.T, s *Suite) {
		must(t, "heartbeat", s.Store.Heartbeat(s.Ctx, runtime.NodeStatus{Service: service, Node: "node-a"}, long))
		ms, err := s.Store.Members(s.Ctx, service)
		must(t, "members", err)
		if len(ms) != 1 || ms[0].LastSeen.IsZero() {
			t.Fatalf("members %+v: want node-a with a LastSeen", ms)
		}
	}},
	{"MembersExpireAfterTheirTTL", func(t *testing.T, s *Suite) {
		s.heartbeat(t, "node-a", short)
		s.heartbeat(t, "node-b", long)
		wantNames(t, "before expiry", s.memberNames(t, service), "node-a", "node-b")
		s.Advance(short + 10*time.Millisecond)
		wantNames(t, "after node-a's ttl", s.memberNames(t, service), "node-b")
		// A new heartbeat brings it back.
		s.heartbeat(t, "node-a", long)
		wantNames(t, "after node-a's new heartbeat", s.memberNames(t, service), "node-a", "node-b")
	}},
	{"HeartbeatsExtendMembership", func(t *testing.T, s *Suite) {
		s.heartbeat(t, "node-a", short)
		s.Advance(short * 2 / 3)
		s.heartbeat(t, "node-a", short)
		s.Advance(short * 2 / 3)
		wantNames(t, "after two heartbeats within the ttl", s.memberNames(t, service), "node-a")
	}},
	{"LeaveRemovesANodeAtOnce", func(t *testing.T, s *Suite) {
		s.heartbeat(t, "node-a", long)
		s.heartbeat(t, "node-b", long)
		must(t, "leave", s.Store.Leave(s.Ctx, service, "node-a"))
		wantNames(t, "after node-a left", s.memberNames(t, service), "node-b")
		must(t, "leave twice", s.Store.Leave(s.Ctx, service, "node-a"))
		must(t, "leave of a stranger", s.Store.Leave(s.Ctx, service, "node-x"))
		wantNames(t, "after more leaves", s.memberNames(t, service), "node-b")
	}},
	{"ServicesAreSeparate", func(t *testing.T, s *Suite) {
		s.heartbeat(t, "node-a", long)
		st := runtime.NodeStatus{Service: "billing", Node: "node-z"}
		must(t, "heartbeat billing", s.Store.Heartbeat(s.Ctx, st, long))
		wantNames(t, "shop", s.memberNames(t, service), "node-a")
		wantNames(t, "billing", s.memberNames(t, "billing"), "node-z")
		must(t, "leave", s.Store.Leave(s.Ctx, "billing", "node-a"))
		wantNames(t, "shop after a leave in billing", s.memberNames(t, service), "node-a")
	}},
	{"LiveIsMembersWithoutTheHeldPartitions", func(t *testing.T, s *Suite) {
		sentA := s.heartbeat(t, "node-a", long)
		must(t, "heartbeat node-b", s.Store.Heartbeat(s.Ctx, runtime.NodeStatus{Service: service, Node: "node-b", LastSeen: t0}, long))
		live, err := s.Store.Live(s.Ctx, service)
		must(t, "live", err)
		if len(live) != 2 || live[0].Node != "node-a" || live[1].Node != "node-b" {
			t.Fatalf("live %+v, want node-a and node-b", live)
		}
		if live[0].Held != nil || live[1].Held != nil {
			t.Fatalf("live members carry held partitions: %+v", live)
		}
		want := sentA
		want.Held = nil
		if got := jsonOf(t, live[0]); got != jsonOf(t, want) {
			t.Fatalf("live status of node-a:\n got %s\nwant %s", got, jsonOf(t, want))
		}
		held, err := s.Store.Held(s.Ctx, service, []string{"node-b", "node-a", "node-x"})
		must(t, "held", err)
		if len(held) != 2 || jsonOf(t, held["node-a"]) != jsonOf(t, sentA.Held) || held["node-b"] == nil || len(held["node-b"]) != 0 {
			t.Fatalf("held %+v: want node-a's %+v, node-b's empty, no node-x", held, sentA.Held)
		}
		if held, err := s.Store.Held(s.Ctx, service, nil); err != nil || len(held) != 0 {
			t.Fatalf("held of no nodes: %v, %v", held, err)
		}
		if ms, err := s.Store.Live(s.Ctx, "nobody"); err != nil || ms != nil {
			t.Fatalf("live of an empty service: %v, %v", ms, err)
		}
	}},
	{"HeldPartitionsFollowEveryHeartbeat", func(t *testing.T, s *Suite) {
		// Each heartbeat's list is what Members and Held read, whether it
		// changed, stayed (sent once, kept since), emptied, or came back
		// after the node left or its records expired.
		hp := func(keys ...string) []runtime.HeldPartition {
			var out []runtime.HeldPartition
			for i, k := range keys {
				out = append(out, runtime.HeldPartition{Subscription: sub, Source: source.Redis, Category: "order", Partition: k, Generation: int64(i + 1)})
			}
			return out
		}
		beat := func(what string, ttl time.Duration, held []runtime.HeldPartition) {
			t.Helper()
			must(t, "heartbeat "+what, s.Store.Heartbeat(s.Ctx, runtime.NodeStatus{Service: service, Node: "node-a", LastSeen: t0, Held: held}, ttl))
		}
		check := func(what string, want []runtime.HeldPartition) {
			t.Helper()
			if want == nil {
				want = []runtime.HeldPartition{}
			}
			ms, err := s.Store.Members(s.Ctx, service)
			must(t, "members "+what, err)
			if len(ms) != 1 || jsonOf(t, ms[0].Held) != jsonOf(t, want) {
				t.Fatalf("%s: members %+v, want node-a holding %+v", what, ms, want)
			}
			held, err := s.Store.Held(s.Ctx, service, []string{"node-a"})
			must(t, "held "+what, err)
			if jsonOf(t, held["node-a"]) != jsonOf(t, want) {
				t.Fatalf("%s: held %+v, want %+v", what, held, want)
			}
		}
		beat("first", long, hp("a", "b"))
		check("first", hp("a", "b"))
		beat("same", long, hp("a", "b"))
		check("same", hp("a", "b"))
		beat("changed", long, hp("a", "c"))
		check("changed", hp("a", "c"))
		beat("none", long, nil)
		check("none", nil)
		beat("back", long, hp("a", "c"))
		check("back", hp("a", "c"))
		must(t, "leave", s.Store.Leave(s.Ctx, service, "node-a"))
		beat("after leaving", long, hp("a", "c"))
		check("after leaving", hp("a", "c"))
		// The same list after the records expired: what a node sends
		// after heartbeats failed for longer than their TTL.
		beat("short", short, hp("d"))
		s.Advance(short + 10*time.Millisecond)
		if names := s.memberNames(t, service); len(names) != 0 {
			t.Fatalf("members %v after the ttl", names)
		}
		beat("after expiry", long, hp("d"))
		check("after expiry", hp("d"))
	}},
}
