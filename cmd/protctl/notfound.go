package main

import (
	"context"
	"strings"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// The filters of the list commands (--service, --subscription, --group,
// --owner) name things; a filter that matches nothing is either a name
// with nothing to show now or a typo. The require* helpers below are
// called once a listing came back empty and tell the two apart by what
// the name leaves in Redis (inspect's *Known methods): a typo exits 4
// (NOT_FOUND) with a message naming the unknown thing and where it was
// looked for, like `partitions ls nosuch::cat`. docs/decisions/
// unknown-names.md says what each name's record is.

// requireService fails with NOT_FOUND when service has no membership set,
// no node status record and no Kafka lease group.
func requireService(ctx context.Context, ins *inspect.Inspector, service string) error {
	known, err := ins.ServiceKnown(ctx, service)
	if err != nil || known {
		return err
	}
	return clierr.NotFound.Errorf("service %q not found: no membership set %s, no node status record %s*, no Kafka lease group protctl:{%s|topic:*}:* (check the spelling; `protctl nodes ls` without --service lists the services found)",
		service, redisstore.MembersKey(service), redisstore.NodeKey(service, ""), service)
}

// requireSubscription fails with NOT_FOUND when subscription never parked
// an entry, is no consumer group with a lease, generation or registry
// entry, and saved no Kafka checkpoint.
func requireSubscription(ctx context.Context, ins *inspect.Inspector, subscription string) error {
	known, err := ins.SubscriptionKnown(ctx, subscription)
	if err != nil || known {
		return err
	}
	return subscriptionNotFound(subscription, nil)
}

// subscriptionNotFound is the NOT_FOUND of a subscription that left no
// trace, for parked ls and a bulk retry or skip alike; withEntries, when
// not nil, are the subscriptions the ledger has entries of.
func subscriptionNotFound(subscription string, withEntries []string) error {
	hint := "`protctl parked ls` lists the subscriptions with entries"
	switch {
	case withEntries == nil:
	case len(withEntries) == 0:
		hint = "the failure ledger has no subscription with entries"
	default:
		hint = "the failure ledger has entries of " + strings.Join(withEntries, ", ")
	}
	return clierr.NotFound.Errorf("--subscription %q not found: it never parked an entry (not in %s), no consumer group of that name has a lease, generation or group registry entry, and it saved no Kafka checkpoint (check the spelling; %s)",
		subscription, redisstore.ParkedSubscriptionsKey, hint)
}

// requireLeaseGroup fails with NOT_FOUND when group has no lease or
// generation key and no group registry lists it.
func requireLeaseGroup(ctx context.Context, ins *inspect.Inspector, group string) error {
	known, err := ins.GroupKnown(ctx, group)
	if err != nil || known {
		return err
	}
	return clierr.NotFound.Errorf("group %q not found: no lease or generation key %s, no group registry (C:__groups__) lists it (check the spelling; `protctl leases ls` lists the groups with leases)",
		group, ins.Layout().LeaseKey(group, "*"))
}

// requireOwner fails with NOT_FOUND when owner holds no lease of the
// partitions listed (the caller's empty result) and no live node of any
// service is called so.
func requireOwner(ctx context.Context, ins *inspect.Inspector, owner string, cats []string) error {
	known, err := ins.NodeKnown(ctx, owner)
	if err != nil || known {
		return err
	}
	return clierr.NotFound.Errorf("owner %q holds no lease of a partition of %s, and no live node of any service is called so (no status record protctl:{S}:node:%s; check the spelling; `protctl partitions ls` shows each lease's owner)",
		owner, strings.Join(cats, ", "), owner)
}

// requireDLQGroup fails with NOT_FOUND when group (a dead-letter
// command's --group filter, which selected nothing) has no trace as a
// group of category's dead letters (inspect.DeadLetterGroupKnown).
func requireDLQGroup(ctx context.Context, ins *inspect.Inspector, category, group string) error {
	known, err := ins.DeadLetterGroupKnown(ctx, category, group, inspect.ScanOptions{})
	if err != nil {
		return dlqErr(err)
	}
	if known {
		return nil
	}
	return clierr.NotFound.Errorf("--group %q not found: no dead letter of %s records it, it is not in the group registry %s nor a consumer group of the stream %s, and it has no lease or generation key %s (check the spelling; `protctl dlq ls %s` lists the groups of its dead letters)",
		group, category, ins.Layout().GroupsKey(category), category, ins.Layout().LeaseKey(group, "*"), category)
}
