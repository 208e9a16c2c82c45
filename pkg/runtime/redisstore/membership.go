package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/storecontract"
)

// Heartbeat stores st as service st.Service's status record of st.Node
// with ttl and marks the node live until the server's time plus ttl, in
// one script that also drops members whose heartbeats expired. A zero
// st.LastSeen is set to the local time (WithNow); nil BackingOff, Paused
// and Throttled are stored as empty lists.
//
// st.Held is stored as a record of its own (HeldKey), rewritten only
// when it differs from what this Store last stored for the node: with
// thousands of held partitions the list is megabytes, and most
// heartbeats would resend it unchanged. Each write carries a tag of its
// own, and the script extends the record only if it still begins with
// the tag this Store last wrote; when it does not (the record expired, a
// failover lost or reverted it, it was overwritten) the script changes
// nothing and says so, and the list is sent again in the same call.
func (s *Store) Heartbeat(ctx context.Context, st runtime.NodeStatus, ttl time.Duration) error {
	const op = "heartbeat"
	if err := storecontract.Heartbeat(op, st, ttl); err != nil {
		return err
	}
	data, err := storecontract.EncodeStatus(st, s.cfg.now)
	if err != nil {
		return fmt.Errorf("redisstore: %s: %w", op, err)
	}
	keys := []string{MembersKey(st.Service), NodeKey(st.Service, st.Node), HeldKey(st.Service, st.Node)}
	mode, arg := "del", ""
	if len(st.Held) > 0 {
		mode = "set"
		if tag, ok := s.held.unchanged(keys[2], st.Held); ok {
			mode, arg = "keep", storecontract.HeldTagPrefix(tag)
		}
	}
	for {
		tag := ""
		if mode == "set" {
			tag = s.held.newTag()
			rec, err := storecontract.EncodeHeld(tag, st.Held)
			if err != nil {
				return fmt.Errorf("redisstore: %s: %w", op, err)
			}
			arg = string(rec)
		}
		reply, err := heartbeatScript.Run(ctx, s.client, keys, st.Node, ttlMillis(ttl), data, mode, arg).Slice()
		if err != nil {
			// Whether the script ran is unknown: the next heartbeat sends
			// the list again.
			s.held.forget(keys[2])
			return mapErr(call{Op: op, Keys: keys}, err)
		}
		if mode == "keep" && len(reply) == 2 && reply[1] == int64(0) {
			mode = "set"
			continue
		}
		if mode != "keep" {
			s.held.stored(keys[2], st.Held, tag)
		}
		return nil
	}
}

// heldSent remembers, per held key, the partitions this Store last stored
// there and the tag it wrote them with, so that a heartbeat with the same
// ones only extends their TTL, after the script has checked the tag.
type heldSent struct {
	mu   sync.Mutex
	m    map[string]heldWrite
	id   string // this Store's, random: tags of two Stores never match
	next uint64
}

type heldWrite struct {
	held []runtime.HeldPartition
	tag  string
}

// newTag names a write: this Store's id and a counter.
func (h *heldSent) newTag() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.id == "" {
		var b [8]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand)
		h.id = hex.EncodeToString(b[:])
	}
	h.next++
	return h.id + "-" + strconv.FormatUint(h.next, 10)
}

// unchanged returns the tag of the last write to key when it stored held.
func (h *heldSent) unchanged(key string, held []runtime.HeldPartition) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w, ok := h.m[key]
	if !ok || !slices.Equal(w.held, held) {
		return "", false
	}
	return w.tag, true
}

func (h *heldSent) stored(key string, held []runtime.HeldPartition, tag string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[string]heldWrite)
	}
	if len(held) == 0 {
		delete(h.m, key)
		return
	}
	h.m[key] = heldWrite{held: slices.Clone(held), tag: tag}
}

func (h *heldSent) forget(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, key)
}

// Members returns the live nodes of service (expiry after the server's
// now), sorted by node id, with their status records and held
// partitions. It costs two round trips: a script lists the live nodes by
// the server's clock, then one MGET reads their records (all in the
// service's slot). A node whose record expired between the two is left
// out, as it would be a moment later anyway. No live node: nil, nil.
func (s *Store) Members(ctx context.Context, service string) ([]runtime.NodeStatus, error) {
	return s.members(ctx, "members", service, true)
}

// Live is Members without the held partitions: the MGET reads the
// status records only, whose size does not depend on how many
// partitions the nodes hold.
func (s *Store) Live(ctx context.Context, service string) ([]runtime.NodeStatus, error) {
	return s.members(ctx, "live members", service, false)
}

func (s *Store) members(ctx context.Context, op, service string, withHeld bool) ([]runtime.NodeStatus, error) {
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
	out, err := s.statusRecords(ctx, op, service, nodes, withHeld)
	if len(out) == 0 || err != nil {
		return nil, err
	}
	return out, nil
}

// Held returns the held partitions of those of nodes that have a status
// record, in one MGET of their status and held records (a record of a
// release that kept them in the status record counts).
func (s *Store) Held(ctx context.Context, service string, nodes []string) (map[string][]runtime.HeldPartition, error) {
	const op = "held partitions"
	if err := storecontract.Service(op, service); err != nil {
		return nil, err
	}
	out := make(map[string][]runtime.HeldPartition, len(nodes))
	if len(nodes) == 0 {
		return out, nil
	}
	sts, err := s.statusRecords(ctx, op, service, nodes, true)
	if err != nil {
		return nil, err
	}
	for _, st := range sts {
		out[st.Node] = st.Held
	}
	return out, nil
}

// statusRecords reads the status records of nodes (and with withHeld their
// held records) in one MGET, leaving out the nodes without one.
func (s *Store) statusRecords(ctx context.Context, op, service string, nodes []string, withHeld bool) ([]runtime.NodeStatus, error) {
	n := len(nodes)
	keys := make([]string, 0, 2*n)
	for _, node := range nodes {
		keys = append(keys, NodeKey(service, node))
	}
	if withHeld {
		for _, node := range nodes {
			keys = append(keys, HeldKey(service, node))
		}
	}
	vals, err := s.client.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, mapErr(call{Op: op, Want: "string"}, err)
	}
	out := make([]runtime.NodeStatus, 0, n)
	for i := range nodes {
		raw, ok := vals[i].(string)
		if !ok {
			// Expired since the script ran (MGET also answers nil for a
			// key of another type; Heartbeat refuses to write over one).
			continue
		}
		st, err := storecontract.DecodeStatus([]byte(raw), withHeld)
		if err != nil {
			return nil, fmt.Errorf("redisstore: %s: key %q does not hold a JSON node status: %w", op, keys[i], err)
		}
		if withHeld {
			if h, ok := vals[n+i].(string); ok {
				if err := storecontract.DecodeHeld(&st, []byte(h)); err != nil {
					return nil, fmt.Errorf("redisstore: %s: key %q does not hold a JSON list of held partitions: %w", op, keys[n+i], err)
				}
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// Leave removes node from service's members and deletes its status
// record and held partitions in one script. Leaving twice, or a node that never joined, is
// not an error.
func (s *Store) Leave(ctx context.Context, service, node string) error {
	const op = "leave"
	if err := storecontract.Node(op, service, node); err != nil {
		return err
	}
	keys := []string{MembersKey(service), NodeKey(service, node), HeldKey(service, node)}
	s.held.forget(keys[2])
	if err := leaveScript.Run(ctx, s.client, keys, node).Err(); err != nil {
		return mapErr(call{Op: op, Keys: keys}, err)
	}
	return nil
}

// isNil reports a missing key's reply.
func isNil(err error) bool { return errors.Is(err, redis.Nil) }
