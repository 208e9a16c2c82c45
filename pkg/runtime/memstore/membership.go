package memstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/storecontract"
)

// Heartbeat stores st as the status of st.Node in st.Service, live until
// the clock's now plus ttl, and drops members that expired. A zero
// st.LastSeen is set to the clock's now; nil Held, BackingOff, Paused
// and Throttled are stored as empty lists. The held partitions are kept
// apart from the status record, as redisstore keeps them.
func (s *Store) Heartbeat(ctx context.Context, st runtime.NodeStatus, ttl time.Duration) error {
	const op = "heartbeat"
	if err := storecontract.Heartbeat(op, st, ttl); err != nil {
		return err
	}
	if err := ctxErr(ctx, op); err != nil {
		return err
	}
	now := s.cfg.clock.Now()
	data, err := storecontract.EncodeStatus(st, func() time.Time { return now })
	if err != nil {
		return fmt.Errorf("memstore: %s: %w", op, err)
	}
	held, err := storecontract.EncodeHeld("", st.Held)
	if err != nil {
		return fmt.Errorf("memstore: %s: %w", op, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	nodes := s.members[st.Service]
	if nodes == nil {
		nodes = make(map[string]member)
		s.members[st.Service] = nodes
	}
	nodes[st.Node] = member{status: data, held: held, expireAt: now.Add(ttl)}
	for n, m := range nodes {
		if !m.expireAt.After(now) {
			delete(nodes, n)
		}
	}
	return nil
}

// Members returns the live nodes of service (expiry after the clock's
// now), sorted by node id, with their held partitions. No live node:
// nil, nil.
func (s *Store) Members(ctx context.Context, service string) ([]runtime.NodeStatus, error) {
	return s.liveMembers(ctx, "members", service, true)
}

// Live is Members without the held partitions (Held nil).
func (s *Store) Live(ctx context.Context, service string) ([]runtime.NodeStatus, error) {
	return s.liveMembers(ctx, "live members", service, false)
}

func (s *Store) liveMembers(ctx context.Context, op, service string, withHeld bool) ([]runtime.NodeStatus, error) {
	if err := storecontract.Service(op, service); err != nil {
		return nil, err
	}
	if err := ctxErr(ctx, op); err != nil {
		return nil, err
	}
	now := s.cfg.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for n, m := range s.members[service] {
		if m.expireAt.After(now) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	slices.Sort(names)
	out := make([]runtime.NodeStatus, 0, len(names))
	for _, n := range names {
		st, err := s.members[service][n].decode(withHeld)
		if err != nil {
			return nil, fmt.Errorf("memstore: %s: %w", op, err)
		}
		out = append(out, st)
	}
	return out, nil
}

// Held returns the held partitions of those of nodes that are live.
func (s *Store) Held(ctx context.Context, service string, nodes []string) (map[string][]runtime.HeldPartition, error) {
	ms, err := s.liveMembers(ctx, "held partitions", service, true)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]runtime.HeldPartition, len(nodes))
	for _, m := range ms {
		if slices.Contains(nodes, m.Node) {
			out[m.Node] = m.Held
		}
	}
	return out, nil
}

func (m member) decode(withHeld bool) (runtime.NodeStatus, error) {
	st, err := storecontract.DecodeStatus(m.status, withHeld)
	if err == nil && withHeld {
		err = storecontract.DecodeHeld(&st, m.held)
	}
	return st, err
}

// Leave removes node from service's members at once. Leaving twice, or a
// node that never joined, is not an error.
func (s *Store) Leave(ctx context.Context, service, node string) error {
	const op = "leave"
	if err := storecontract.Node(op, service, node); err != nil {
		return err
	}
	if err := ctxErr(ctx, op); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.members[service], node)
	return nil
}
