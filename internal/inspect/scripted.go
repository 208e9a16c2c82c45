package inspect

import (
	"context"
	_ "embed"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

// On a single Redis server a chunk of partitions is read with two
// read-only scripts (EVALSHA_RO) instead of a pipeline of five or six
// commands per partition: one for every lane's type, length, newest
// entry and groups, one for every group's lease, its TTL and the
// generation. The server then spends its time on the reads themselves
// rather than on parsing, dispatching and answering 600,000 commands for
// 100,000 partitions, and the client decodes two replies per chunk
// instead of building a command object per read (docs/benchmarks.md,
// "Inspect"). A script holds the server for the chunk's duration, about
// a millisecond for the default 250 partitions.
//
// A script cannot touch keys of different hash slots, so on Redis Cluster
// the pipelined reads stay (readLanesPipelined); and where scripts are
// refused (an ACL user without EVALSHA_RO, a server older than 7.0) the
// Inspector falls back to them for the rest of its life.

//go:embed lanes.lua
var lanesSource string

//go:embed leases.lua
var leasesSource string

var (
	lanesScript  = redis.NewScript(lanesSource)
	leasesScript = redis.NewScript(leasesSource)
)

// errScriptsRefused marks a script reply that says scripts cannot run
// here (not an answer about the keys): the caller falls back.
var errScriptsRefused = errors.New("inspect: read-only scripts refused")

// scriptErr classifies a script's error: a refusal of scripting itself
// wraps errScriptsRefused; anything else is wrapped like a command's.
func scriptErr(op string, err error) error {
	if isReplyErr(err) {
		msg := err.Error()
		for _, p := range []string{"NOPERM", "ERR unknown command", "NOSCRIPT"} {
			if strings.HasPrefix(msg, p) {
				return errors.Join(errScriptsRefused, err)
			}
		}
	}
	return wrapErr(op, "", "", err)
}

// readLanes reads keys' partitions and each lane's groups: with the
// scripts where they can run, else pipelined.
func (in *Inspector) readLanes(ctx context.Context, w *walk, keys []string) ([]Partition, [][2]laneRead, error) {
	if in.scripted && !in.scriptsRefused.Load() {
		parts, lanes, err := in.readLanesScripted(ctx, w, keys)
		if !errors.Is(err, errScriptsRefused) {
			return parts, lanes, err
		}
		in.scriptsRefused.Store(true)
	}
	return in.readLanesPipelined(ctx, w, keys)
}

// readLanesScripted is readLanes with two scripts per chunk.
func (in *Inspector) readLanesScripted(ctx context.Context, w *walk, keys []string) ([]Partition, [][2]laneRead, error) {
	const op = "read partitions"
	lanes := make([][2]laneRead, len(keys))
	streams := make([]string, 0, 2*len(keys))
	for i, k := range keys {
		main, bf := in.layout.Stream(w.category, k), in.layout.LaneStream(w.category, k, in.cfg.backfill)
		lanes[i] = [2]laneRead{{lane: Lane{Name: "main", Stream: main}}, {lane: Lane{Name: in.cfg.backfill, Stream: bf}}}
		streams = append(streams, main, bf)
	}
	res, err := lanesScript.RunRO(ctx, in.client, streams).Slice()
	if err != nil {
		return nil, nil, scriptErr(op, err)
	}
	if len(res) != len(streams) {
		return nil, nil, wrapErr(op, "", "", errors.New("lanes script: short reply"))
	}
	names := make([][]string, len(keys))
	var leaseKeys []string
	for i, k := range keys {
		for j := range 2 {
			lanes[i][j].fromScript(res[2*i+j])
		}
		names[i] = groupNames(w, lanes[i])
		for _, g := range names[i] {
			leaseKeys = append(leaseKeys, in.layout.LeaseKey(g, k), in.layout.GenerationKey(g, k))
		}
	}

	var vals []any
	if len(leaseKeys) > 0 {
		if vals, err = leasesScript.RunRO(ctx, in.client, leaseKeys).Slice(); err != nil {
			return nil, nil, scriptErr(op, err)
		}
		if len(vals) != 3*len(leaseKeys)/2 {
			return nil, nil, wrapErr(op, "", "", errors.New("leases script: short reply"))
		}
	}
	parts := make([]Partition, len(keys))
	for i, k := range keys {
		lr := make([]leaseRead, len(names[i]))
		for j := range lr {
			v := vals[:3]
			vals = vals[3:]
			lr[j] = leaseRead{lease: stringOrNil(v[0]), gen: stringOrNil(v[2])}
			if ms, ok := v[1].(int64); ok {
				lr[j].pttl, lr[j].pttlOK = ms, true
			}
		}
		parts[i] = in.assemble(w, k, lanes[i], names[i], lr)
	}
	return parts, lanes, nil
}

// fromScript fills r from one lane's reply of lanes.lua.
func (r *laneRead) fromScript(v any) {
	a, _ := v.([]any)
	if len(a) == 0 {
		return
	}
	switch a[0] {
	case int64(1):
		if len(a) < 4 {
			return
		}
		r.lane.Exists = true
		r.lane.Length, _ = a[1].(int64)
		if id, ok := a[2].(string); ok {
			r.lane.LastEntryID = ptr(id)
		}
		gs, _ := a[3].([]any)
		r.groups = make([]redis.XInfoGroup, 0, len(gs))
		for _, g := range gs {
			r.groups = append(r.groups, xinfoGroup(g))
		}
	case int64(2):
		// What the pipelined reads report for XINFO GROUPS on a key of
		// another type.
		r.err = &broker.WrongTypeError{Op: "read lane", Key: r.lane.Stream, Want: "stream"}
	}
}

// xinfoGroup decodes one group of XINFO GROUPS as go-redis does: a lag
// the server cannot tell (nil) is -1.
func xinfoGroup(v any) redis.XInfoGroup {
	var g redis.XInfoGroup
	var kv []any
	switch x := v.(type) {
	case []any: // RESP2 inside the script: flat pairs
		kv = x
	case map[any]any:
		for k, val := range x {
			kv = append(kv, k, val)
		}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		name, _ := kv[i].(string)
		val := kv[i+1]
		switch name {
		case "name":
			g.Name, _ = val.(string)
		case "consumers":
			g.Consumers, _ = val.(int64)
		case "pending":
			g.Pending, _ = val.(int64)
		case "last-delivered-id":
			g.LastDeliveredID, _ = val.(string)
		case "entries-read":
			g.EntriesRead, _ = val.(int64)
		case "lag":
			if n, ok := val.(int64); ok {
				g.Lag = n
			} else {
				g.Lag = -1
			}
		}
	}
	return g
}
