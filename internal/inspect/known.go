package inspect

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// The *Known methods tell a name that something in Redis records from a
// typo, for the filters of the list commands (--group, --subscription,
// --service, --owner): a filter that matches nothing because the name is
// misspelt must say so (the CLI's NOT_FOUND) rather than print an empty
// list as if all were well. Each is called only once a listing came back
// empty, and each stops its paced SCAN at the first key that answers.
// docs/decisions/0030-cli-truth-wrong-type-unknown-names.md says what each name's record is.

// GroupKnown reports whether a consumer group named group has left a
// trace: a lease or generation key of one of its partitions
// (G:K:__lease__, G:K:__generation__), or a category's group registry
// (C:__groups__) that lists it.
func (in *Inspector) GroupKnown(ctx context.Context, group string) (bool, error) {
	const op = "find group"
	if err := in.layout.ValidateName(op, "group", group); err != nil {
		return false, err
	}
	found, err := in.scanFound(ctx, escapeGlob(group+":")+"*:__*__", func(k string) bool {
		gk, ok := in.parseLeaseKey(k)
		return ok && gk.group == group
	})
	if found || err != nil {
		return found, err
	}
	// The registries: one SISMEMBER per category found, pipelined by page.
	var regs []string
	err = in.scanKeys(ctx, "*:__groups__", "set", ScanOptions{Count: 5000}, func(k string) bool {
		regs = append(regs, k)
		return true
	})
	if err != nil {
		return false, err
	}
	for start := 0; start < len(regs); start += in.cfg.chunk * 4 {
		end := min(start+in.cfg.chunk*4, len(regs))
		p := in.client.Pipeline()
		cmds := make([]*redis.BoolCmd, 0, end-start)
		for _, r := range regs[start:end] {
			cmds = append(cmds, p.SIsMember(ctx, r, group))
		}
		if _, err := p.Exec(ctx); pipeErr(op, err) != nil {
			return false, pipeErr(op, err)
		}
		for _, c := range cmds {
			if c.Val() {
				return true, nil
			}
		}
	}
	return false, nil
}

// SubscriptionKnown reports whether subscription has left a trace: the
// failure ledger had entries of it (redisstore.ParkedSubscriptionsKey,
// its ledger index), it is a Redis subscription's consumer group
// (GroupKnown), or it saved a checkpoint on a Kafka topic of some service
// (protctl:{S|topic:T}:checkpoints:<subscription>).
func (in *Inspector) SubscriptionKnown(ctx context.Context, subscription string) (bool, error) {
	const op = "find subscription"
	p := in.client.Pipeline()
	member := p.SIsMember(ctx, redisstore.ParkedSubscriptionsKey, subscription)
	exists := p.Exists(ctx, redisstore.ParkedEntriesKey(subscription), redisstore.ParkedIndexKey(subscription))
	if _, err := p.Exec(ctx); pipeErr(op, err) != nil {
		return false, pipeErr(op, err)
	}
	if err := member.Err(); err != nil {
		return false, in.typed(ctx, wrapErr(op, redisstore.ParkedSubscriptionsKey, "set", err))
	}
	if member.Val() || exists.Val() > 0 {
		return true, nil
	}
	if in.layout.ValidateName(op, "group", subscription) == nil {
		// A name that cannot be a group (a Kafka subscription's may
		// contain ':') is looked up by its checkpoints only.
		if known, err := in.GroupKnown(ctx, subscription); known || err != nil {
			return known, err
		}
	}
	suffix := "}:checkpoints:" + subscription
	return in.scanFound(ctx, "protctl:{*"+escapeGlob(suffix), func(k string) bool {
		return strings.HasSuffix(k, suffix)
	})
}

// ServiceKnown reports whether service has left a trace: its membership
// set or a node's status record (protctl:{S}:members, protctl:{S}:node:*),
// or a Kafka topic's lease group (protctl:{S|topic:T}:*), as Services
// finds them.
func (in *Inspector) ServiceKnown(ctx context.Context, service string) (bool, error) {
	n, err := in.client.Exists(ctx, redisstore.MembersKey(service)).Result()
	if err != nil {
		return false, wrapErr("find service", redisstore.MembersKey(service), "", err)
	}
	if n > 0 {
		return true, nil
	}
	esc := escapeGlob(service)
	for _, match := range []string{"protctl:{" + esc + "}:*", "protctl:{" + esc + "|*"} {
		if found, err := in.scanFound(ctx, match, nil); found || err != nil {
			return found, err
		}
	}
	return false, nil
}

// NodeKnown reports whether a live node of any service is called node: its
// status record (protctl:{S}:node:<node>) exists.
func (in *Inspector) NodeKnown(ctx context.Context, node string) (bool, error) {
	suffix := "}:node:" + node
	return in.scanFound(ctx, "protctl:{*"+escapeGlob(suffix), func(k string) bool {
		return strings.HasSuffix(k, suffix)
	})
}

// scanFound runs a paced SCAN MATCH match and reports whether it returned
// a key that keep accepts (every key when keep is nil), stopping there.
func (in *Inspector) scanFound(ctx context.Context, match string, keep func(string) bool) (bool, error) {
	err := in.scanKeys(ctx, match, "", ScanOptions{Count: 5000}, func(k string) bool {
		return keep == nil || keep(k)
	}, errFound)
	switch {
	case errors.Is(err, errFound):
		return true, nil
	case err != nil:
		return false, err
	}
	return false, nil
}
