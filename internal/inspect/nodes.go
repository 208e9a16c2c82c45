package inspect

import (
	"context"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// statusRecordTypes fails with a *broker.WrongTypeError when a member of
// service's membership set that nodes (what Members returned) leaves out
// has a status record of another type than a string. Members reads the
// records with MGET, which answers nil, as for a record that expired, for
// such a key: the node would silently vanish from `nodes ls`. The set
// holds the live nodes and those expired since the last prune, so this is
// one ZRANGEBYSCORE, and one TYPE per member left out. The same goes for
// a node's held record (redisstore.HeldKey), checked for the members
// left out and those read holding nothing.
func (in *Inspector) statusRecordTypes(ctx context.Context, service string, nodes []runtime.NodeStatus) error {
	const op = "list nodes"
	// ZRANGEBYSCORE, which the readonly ACL role grants (for the
	// members script), rather than ZRANGE.
	members, err := in.client.ZRangeByScore(ctx, redisstore.MembersKey(service), &redis.ZRangeBy{Min: "-inf", Max: "+inf"}).Result()
	if err != nil {
		// The members script already read the set (and named a set of
		// the wrong type); a failure here is the transport's.
		return in.typed(ctx, wrapErr(op, redisstore.MembersKey(service), "zset", err))
	}
	var missing []string
	for _, m := range members {
		i := slices.IndexFunc(nodes, func(n runtime.NodeStatus) bool { return n.Node == m })
		switch {
		case i < 0:
			missing = append(missing, redisstore.NodeKey(service, m), redisstore.HeldKey(service, m))
		case len(nodes[i].Held) == 0:
			// A held record of another type reads as none too (and stops
			// the node's heartbeats).
			missing = append(missing, redisstore.HeldKey(service, m))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	p := in.client.Pipeline()
	types := make([]*redis.StatusCmd, len(missing))
	for i, k := range missing {
		types[i] = p.Type(ctx, k)
	}
	if _, err := p.Exec(ctx); pipeErr(op, err) != nil {
		return pipeErr(op, err)
	}
	for i, k := range missing {
		if t := types[i].Val(); t != "" && t != "none" && t != "string" {
			return &broker.WrongTypeError{Op: op, Key: k, Want: "string", Got: t}
		}
	}
	return nil
}
