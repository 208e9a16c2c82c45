package storetest

import (
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

var inputCases = []Case{
	{"InvalidMembershipArgumentsAreRefused", func(t *testing.T, s *Suite) {
		valid := runtime.NodeStatus{Service: service, Node: "node-a"}
		for _, c := range []struct {
			name string
			st   runtime.NodeStatus
			ttl  time.Duration
		}{
			{"no service", runtime.NodeStatus{Node: "node-a"}, long},
			{"no node", runtime.NodeStatus{Service: service}, long},
			{"braces in the service", runtime.NodeStatus{Service: "sh{op}", Node: "node-a"}, long},
			{"an opening brace in the service", runtime.NodeStatus{Service: "sh{op", Node: "node-a"}, long},
			{"a closing brace in the service", runtime.NodeStatus{Service: "shop}", Node: "node-a"}, long},
			{"a zero ttl", valid, 0},
			{"a negative ttl", valid, -time.Second},
		} {
			err := s.Store.Heartbeat(s.Ctx, c.st, c.ttl)
			wantErrIs(t, "heartbeat with "+c.name, err, broker.ErrInvalidArgument)
		}
		_, err := s.Store.Members(s.Ctx, "")
		wantErrIs(t, "members of no service", err, broker.ErrInvalidArgument)
		_, err = s.Store.Live(s.Ctx, "")
		wantErrIs(t, "live members of no service", err, broker.ErrInvalidArgument)
		_, err = s.Store.Held(s.Ctx, "", []string{"node-a"})
		wantErrIs(t, "held partitions of no service", err, broker.ErrInvalidArgument)
		wantErrIs(t, "leave of no node", s.Store.Leave(s.Ctx, service, ""), broker.ErrInvalidArgument)
		wantErrIs(t, "leave of no service", s.Store.Leave(s.Ctx, "", "node-a"), broker.ErrInvalidArgument)
		if names := s.memberNames(t, service); len(names) != 0 {
			t.Fatalf("refused heartbeats made members %v", names)
		}
	}},
	{"InvalidCheckpointArgumentsAreRefused", func(t *testing.T, s *Suite) {
		s.SetLease(t, lease0, tokenA)
		f := broker.Fence{LeaseKey: lease0, Token: tokenA}
		for _, c := range []struct {
			name  string
			f     broker.Fence
			group string
			sub   string
			p     int32
			next  int64
		}{
			{"no lease key", broker.Fence{Token: tokenA}, leaseGroup, sub, 0, 1},
			{"no token", broker.Fence{LeaseKey: lease0}, leaseGroup, sub, 0, 1},
			{"no lease group", f, "", sub, 0, 1},
			{"a brace in the lease group", f, "shop|{x}", sub, 0, 1},
			{"no subscription", f, leaseGroup, "", 0, 1},
			{"a negative partition", f, leaseGroup, sub, -1, 1},
			{"a negative offset", f, leaseGroup, sub, 0, -1},
		} {
			err := s.Store.Save(s.Ctx, c.f, c.group, c.sub, c.p, c.next)
			wantErrIs(t, "save with "+c.name, err, broker.ErrInvalidArgument)
		}
		_, _, err := s.Store.Load(s.Ctx, "", sub, 0)
		wantErrIs(t, "load with no lease group", err, broker.ErrInvalidArgument)
		_, _, err = s.Store.Load(s.Ctx, leaseGroup, sub, -1)
		wantErrIs(t, "load of a negative partition", err, broker.ErrInvalidArgument)
		_, err = s.Store.LoadAll(s.Ctx, leaseGroup, "")
		wantErrIs(t, "load all with no subscription", err, broker.ErrInvalidArgument)
		all, err := s.Store.LoadAll(s.Ctx, leaseGroup, sub)
		must(t, "load all", err)
		if len(all) != 0 {
			t.Fatalf("refused saves wrote %v", all)
		}
	}},
	{"InvalidLedgerArgumentsAreRefused", func(t *testing.T, s *Suite) {
		s.SetLease(t, lease0, tokenA)
		f := broker.Fence{LeaseKey: lease0, Token: tokenA}
		noSub := kafkaEntry("", "order-1", t0)
		noAgg := kafkaEntry(sub, "", t0)
		reserved := kafkaEntry("__subscriptions__", "order-1", t0)
		badStatus := kafkaEntry(sub, "order-1", t0)
		badStatus.Status = "stuck"
		for name, p := range map[string]ledger.Parked{"no subscription": noSub, "no aggregate": noAgg, "a reserved subscription": reserved, "an unknown status": badStatus} {
			wantErrIs(t, "park with "+name, s.Store.Park(s.Ctx, f, p), broker.ErrInvalidArgument)
		}
		ok := kafkaEntry(sub, "order-1", t0)
		wantErrIs(t, "park with no token", s.Store.Park(s.Ctx, broker.Fence{LeaseKey: lease0}, ok), broker.ErrInvalidArgument)
		wantErrIs(t, "park with no lease key", s.Store.Park(s.Ctx, broker.Fence{Token: tokenA}, ok), broker.ErrInvalidArgument)
		wantErrIs(t, "set status with no aggregate", s.Store.SetStatus(s.Ctx, f, sub, "", ledger.StatusParked), broker.ErrInvalidArgument)
		wantErrIs(t, "set status to an unknown status", s.Store.SetStatus(s.Ctx, f, sub, "order-1", "stuck"), broker.ErrInvalidArgument)
		wantErrIs(t, "resolve with no subscription", s.Store.Resolve(s.Ctx, f, "", "order-1"), broker.ErrInvalidArgument)
		_, err := s.Store.GetParked(s.Ctx, sub, "", "")
		wantErrIs(t, "get with no aggregate", err, broker.ErrInvalidArgument)
		_, err = s.Store.GetParked(s.Ctx, "", "", "order-1")
		wantErrIs(t, "get with no subscription", err, broker.ErrInvalidArgument)
		wantErrIs(t, "retry with no aggregate", s.Store.RequestRetry(s.Ctx, sub, "", "", "alice"), broker.ErrInvalidArgument)
		wantErrIs(t, "skip with no subscription", s.Store.RequestSkip(s.Ctx, "", "", "order-1", "r", "alice"), broker.ErrInvalidArgument)
		_, err = s.Store.WatchRequests(s.Ctx, "")
		wantErrIs(t, "watch with no subscription", err, broker.ErrInvalidArgument)
		_, err = s.Store.ListParked(s.Ctx, "__subscriptions__")
		wantErrIs(t, "list of a reserved subscription", err, broker.ErrInvalidArgument)
		wantList(t, "after refused calls", s.list(t, ""))
	}},
}
