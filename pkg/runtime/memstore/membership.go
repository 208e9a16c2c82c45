package memstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/storecontract"
)

// Heartbeat stores st as the status of st.Node in st.Service, live until
// the clock's now plus ttl, and drops members that expired. A zero
// st.LastSeen is set to the clock's now; nil Held, BackingOff, Paused
// and Throttled are stored as empty lists.
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
	s.mu.Lock()
	defer s.mu.Unlock()
	nodes := s.members[st.Service]
	if nodes == nil {
		nodes = make(map[string]member)
		s.members[st.Service] = nodes
	}
	nodes[st.Node] = member{status: data, expireAt: now.Add(ttl)}
	for n, m := range nodes {
		if !m.expireAt.After(now) {
			delete(nodes, n)
		}
	}
	return nil
}

// Members returns the live nodes of service (expiry after the clock's
// now), sorted by node id. No live node: nil, nil.
func (s *Store) Members(ctx context.Context, service string) ([]runtime.NodeStatus, error) {
	const op = "members"
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
		var st runtime.NodeStatus
		if err := json.Unmarshal(s.members[service][n].status, &st); err != nil {
			return nil, fmt.Errorf("memstore: %s: %w", op, err)
		}
		out = append(out, st)
	}
	return out, nil
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
