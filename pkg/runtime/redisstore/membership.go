package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/storecontract"
)

// Heartbeat stores st as service st.Service's status record of st.Node
// with ttl and marks the node live until the server's time plus ttl, in
// one script that also drops members whose heartbeats expired. A zero
// st.LastSeen is set to the local time (WithNow); nil Held, BackingOff,
// Paused and Throttled are stored as empty lists.
func (s *Store) Heartbeat(ctx context.Context, st runtime.NodeStatus, ttl time.Duration) error {
	const op = "heartbeat"
	if err := storecontract.Heartbeat(op, st, ttl); err != nil {
		return err
	}
	data, err := storecontract.EncodeStatus(st, s.cfg.now)
	if err != nil {
		return fmt.Errorf("redisstore: %s: %w", op, err)
	}
	keys := []string{MembersKey(st.Service), NodeKey(st.Service, st.Node)}
	if err := heartbeatScript.Run(ctx, s.client, keys, st.Node, ttlMillis(ttl), data).Err(); err != nil {
		return mapErr(call{Op: op, Keys: keys}, err)
	}
	return nil
}

// Members returns the live nodes of service (expiry after the server's
// now), sorted by node id, with their status records. It costs two round
// trips: a script lists the live nodes by the server's clock, then one
// MGET reads their records (all in the service's slot). A node whose
// record expired between the two is left out, as it would be a moment
// later anyway. No live node: nil, nil.
func (s *Store) Members(ctx context.Context, service string) ([]runtime.NodeStatus, error) {
	const op = "members"
	if err := storecontract.Service(op, service); err != nil {
		return nil, err
	}
	keys := []string{MembersKey(service)}
	nodes, err := membersScript.Run(ctx, s.client, keys).StringSlice()
	if err != nil {
		return nil, mapErr(call{Op: op, Keys: keys}, err)
	}
	if len(nodes) == 0 {
		return nil, nil
	}
	slices.Sort(nodes)
	nodeKeys := make([]string, len(nodes))
	for i, n := range nodes {
		nodeKeys[i] = NodeKey(service, n)
	}
	vals, err := s.client.MGet(ctx, nodeKeys...).Result()
	if err != nil {
		return nil, mapErr(call{Op: op, Want: "string"}, err)
	}
	out := make([]runtime.NodeStatus, 0, len(vals))
	for i, v := range vals {
		raw, ok := v.(string)
		if !ok {
			// Expired since the script ran (MGET also answers nil for a
			// key of another type; Heartbeat refuses to write over one).
			continue
		}
		var st runtime.NodeStatus
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			return nil, fmt.Errorf("redisstore: %s: key %q does not hold a JSON node status: %w", op, nodeKeys[i], err)
		}
		out = append(out, st)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// Leave removes node from service's members and deletes its status
// record in one script. Leaving twice, or a node that never joined, is
// not an error.
func (s *Store) Leave(ctx context.Context, service, node string) error {
	const op = "leave"
	if err := storecontract.Node(op, service, node); err != nil {
		return err
	}
	keys := []string{MembersKey(service), NodeKey(service, node)}
	if err := leaveScript.Run(ctx, s.client, keys, node).Err(); err != nil {
		return mapErr(call{Op: op, Keys: keys}, err)
	}
	return nil
}

// isNil reports a missing key's reply.
func isNil(err error) bool { return errors.Is(err, redis.Nil) }
