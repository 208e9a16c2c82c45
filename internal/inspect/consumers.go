package inspect

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// StaleConsumer is a consumer of a group on a partition lane that holds
// no pending entries and is not the consumer the group's live lease on
// the partition names: what an earlier lease generation (owner:generation)
// or a Protean instance left behind. It carries nothing but its idle
// time; `protctl partitions prune-consumers` deletes it, fenced.
type StaleConsumer struct {
	Category string `json:"category"`
	Key      string `json:"key"`
	Stream   string `json:"stream"`
	Group    string `json:"group"`
	Consumer string `json:"consumer"`
	// IdleMs is the time since the consumer last read or claimed.
	IdleMs int64 `json:"idleMs"`
	// Lease is the group's live lease on the partition (owner:generation)
	// when one is held; null when the lease is free.
	Lease *string `json:"lease"`
}

// laneRef is a partition lane found by a scan.
type laneRef struct{ key, stream string }

// staleConsumers lists the stale consumers of lanes, in chunks of two
// pipelined round trips: XINFO GROUPS of each lane, then XINFO CONSUMERS
// of each group with a GET of the group's lease on the partition. A
// group whose lease key holds another type is left out (who reads there
// cannot be told), as is a lane that vanished between the scan and the
// read.
func (in *Inspector) staleConsumers(ctx context.Context, category string, lanes []laneRef) ([]StaleConsumer, error) {
	const op = "fsck consumers"
	out := []StaleConsumer{}
	for start := 0; start < len(lanes); start += in.cfg.chunk {
		batch := lanes[start:min(start+in.cfg.chunk, len(lanes))]
		p := in.client.Pipeline()
		groups := make([]*redis.XInfoGroupsCmd, len(batch))
		for i, l := range batch {
			groups[i] = p.XInfoGroups(ctx, l.stream)
		}
		if _, err := p.Exec(ctx); pipeErr(op, err) != nil {
			return nil, pipeErr(op, err)
		}
		type read struct {
			lane      laneRef
			group     string
			consumers *redis.XInfoConsumersCmd
			lease     *redis.StringCmd
		}
		var reads []read
		p = in.client.Pipeline()
		for i, l := range batch {
			gs, err := groups[i].Result()
			if err != nil {
				if isNoSuchKey(err) {
					continue
				}
				return nil, wrapErr(op, l.stream, "stream", err)
			}
			for _, g := range gs {
				reads = append(reads, read{
					lane: l, group: g.Name,
					consumers: p.XInfoConsumers(ctx, l.stream, g.Name),
					lease:     p.Get(ctx, in.layout.LeaseKey(g.Name, l.key)),
				})
			}
		}
		if len(reads) == 0 {
			continue
		}
		if _, err := p.Exec(ctx); pipeErr(op, err) != nil {
			return nil, pipeErr(op, err)
		}
		for _, r := range reads {
			var lease *string
			switch v, err := r.lease.Result(); {
			case err == nil:
				lease = &v
			case errors.Is(err, redis.Nil):
			case isReplyErr(err) && strings.HasPrefix(err.Error(), "WRONGTYPE"):
				continue // not a lease: leave the group's consumers alone
			default:
				return nil, wrapErr(op, in.layout.LeaseKey(r.group, r.lane.key), "string", err)
			}
			cs, err := r.consumers.Result()
			if err != nil {
				if isNoSuchKey(err) || (isReplyErr(err) && strings.HasPrefix(err.Error(), "NOGROUP")) {
					continue // the lane or group went since XINFO GROUPS
				}
				return nil, wrapErr(op, r.lane.stream, "stream", err)
			}
			for _, c := range cs {
				if c.Pending != 0 || (lease != nil && *lease == c.Name) {
					continue
				}
				out = append(out, StaleConsumer{
					Category: category, Key: r.lane.key, Stream: r.lane.stream, Group: r.group,
					Consumer: c.Name, IdleMs: c.Idle.Milliseconds(), Lease: lease,
				})
			}
		}
	}
	slices.SortFunc(out, func(a, b StaleConsumer) int {
		return cmp.Or(strings.Compare(a.Key, b.Key), strings.Compare(a.Stream, b.Stream),
			strings.Compare(a.Group, b.Group), strings.Compare(a.Consumer, b.Consumer))
	})
	return out, nil
}
