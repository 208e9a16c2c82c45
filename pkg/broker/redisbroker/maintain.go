package redisbroker

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// ReapPartition retires a cold partition in one script: it checks every
// lane and group, then removes key from category's index and deletes the
// main and backfill lanes, or changes nothing and says why. Lease and
// generation keys are never touched, so a later owner still gets a
// greater generation. Time is the server's (TIME), so clock skew between
// nodes cannot make a reap early.
//
// Because the checks and the delete are one atomic step and the Protean
// layout's PublishPartitioned appends and records in one atomic step too,
// a publish racing a reap either blocks it (its entry is newer than
// minIdle, or not delivered) or lands after it and recreates both the
// stream and the index entry.
//
// In the cluster layout the index and the registry live in slots of
// their own, so the reap is a sequence (see reapCluster): read the
// registry, check the lanes (a hot partition stops here, the index
// untouched), remove the index entry, then check again and delete in one
// script on the partition's slot, and put the index entry back if that
// script refused. Removing the entry before the delete, and publish
// recording after its append, is what keeps a racing publish's stream in
// the index (docs/decisions/0005-cluster-layout.md).
func (b *Broker) ReapPartition(ctx context.Context, category, key string, minIdle time.Duration, backfillSuffix string) (broker.ReapResult, error) {
	return b.reap(ctx, category, key, minIdle, backfillSuffix, nil)
}

// ReapPartitionLeases is ReapPartition that also requires each of leases
// to hold the value seen (no key for ""), checked in the same script as
// the lanes (in the cluster layout, in both the check and the delete
// script: a partition's leases share its slot), and deletes those lease
// keys with the lanes (broker.LeaseReaper).
func (b *Broker) ReapPartitionLeases(ctx context.Context, category, key string, minIdle time.Duration, backfillSuffix string, leases []broker.SeenLease) (broker.ReapResult, error) {
	for _, sl := range leases {
		if err := b.cfg.layout.ValidateName("reap", "group", sl.Group); err != nil {
			return broker.ReapResult{}, err
		}
	}
	return b.reap(ctx, category, key, minIdle, backfillSuffix, leases)
}

func (b *Broker) reap(ctx context.Context, category, key string, minIdle time.Duration, backfillSuffix string, leases []broker.SeenLease) (broker.ReapResult, error) {
	const op = "reap"
	if err := b.validCategory(op, category); err != nil {
		return broker.ReapResult{}, err
	}
	if backfillSuffix == "" {
		backfillSuffix = broker.DefaultBackfillSuffix
	}
	if backfillSuffix == broker.DLQSuffix || strings.Contains(backfillSuffix, ":") {
		// A "dlq" suffix would make the reap delete the dead letters.
		return broker.ReapResult{}, &broker.InvalidArgumentError{Op: op, Arg: "backfillSuffix", Value: strconv.Quote(backfillSuffix), Reason: `must not be "dlq" or contain ":"`}
	}
	if err := b.validKey(op, key, backfillSuffix); err != nil {
		return broker.ReapResult{}, err
	}
	idle, err := idleMillis(op, minIdle)
	if err != nil {
		return broker.ReapResult{}, err
	}
	l := b.cfg.layout
	if l.IsCluster() {
		return b.reapCluster(ctx, category, key, idle, backfillSuffix, leases)
	}
	keys := []string{
		l.IndexKey(category),
		l.GroupsKey(category),
		l.Stream(category, key),
		l.LaneStream(category, key, backfillSuffix),
	}
	args := []any{key, idle}
	for _, sl := range leases {
		keys = append(keys, l.LeaseKey(sl.Group, key))
		args = append(args, sl.Token)
	}
	reply, err := reapScript.Run(ctx, b.client, keys, args...).Slice()
	if err != nil {
		return broker.ReapResult{}, mapErr(call{Op: op, Keys: keys}, err)
	}
	return reapVerdict(reply, leases, l, key)
}

// reapCluster is ReapPartition in the cluster layout:
//
//  1. SMEMBERS the registry (its own slot);
//  2. reaplanes.lua "check": a partition that is not cold stops here, and
//     the index is never touched for it;
//  3. SREM the key from the index (its own slot);
//  4. reaplanes.lua "delete": check again, delete the lanes if still cold;
//  5. if step 4 refused or failed, SADD the key back.
//
// Only step 3 removes an index entry, and it always comes before the
// delete; a publish records its key after its append. So whatever the
// interleaving with publishes, a stream that is non-empty once both are
// done is in the index (the decision record walks through each order).
// The cost of this: between steps 3 and 5 a partition a racing publish
// made hot again is missing from PartitionKeys for a moment, and a reaper
// that dies between them leaves it out until the key's next publish or a
// RecordPartition. A group registered after step 1 is not seen by this
// reap, exactly as if it had registered after the reap.
func (b *Broker) reapCluster(ctx context.Context, category, key string, idle int64, backfillSuffix string, leases []broker.SeenLease) (broker.ReapResult, error) {
	const op = "reap"
	l := b.cfg.layout
	groupsKey := l.GroupsKey(category)
	registered, err := b.client.SMembers(ctx, groupsKey).Result()
	if err != nil {
		return broker.ReapResult{}, mapErr(call{Op: op, Key: groupsKey, Want: "set"}, err)
	}
	lanes := []string{l.Stream(category, key), l.LaneStream(category, key, backfillSuffix)}
	args := make([]any, 0, 3+len(leases)+len(registered))
	args = append(args, idle, "", len(leases))
	for _, sl := range leases {
		lanes = append(lanes, l.LeaseKey(sl.Group, key))
		args = append(args, sl.Token)
	}
	for _, g := range registered {
		args = append(args, g)
	}
	run := func(mode string) (broker.ReapResult, error) {
		args[1] = mode
		reply, err := reapLanesScript.Run(ctx, b.client, lanes, args...).Slice()
		if err != nil {
			return broker.ReapResult{}, mapErr(call{Op: op, Keys: lanes}, err)
		}
		return reapVerdict(reply, leases, l, key)
	}
	if res, err := run("check"); err != nil || !res.Reaped {
		return res, err
	}
	index := l.IndexKey(category)
	if err := b.client.SRem(ctx, index, key).Err(); err != nil {
		return broker.ReapResult{}, mapErr(call{Op: op, Key: index, Want: "set"}, err)
	}
	res, err := run("delete")
	if err == nil && res.Reaped {
		return res, nil
	}
	if rerr := b.client.SAdd(ctx, index, key).Err(); rerr != nil {
		rerr = mapErr(call{Op: op, Key: index, Want: "set"}, rerr)
		if err == nil {
			err = fmt.Errorf("%w (the reap refused, %s, but could not put %q back in %s; RecordPartition repairs it)", rerr, res.Reason, key, index)
		} else {
			err = fmt.Errorf("%w; and putting %q back in %s failed: %w", err, key, index, rerr)
		}
		return broker.ReapResult{}, err
	}
	return res, err
}

// reapVerdict turns the script's {1} or {0, lane, group, reason, detail}
// into a ReapResult with a sentence an operator can act on. For a lease
// verdict the lane field is the lease key, which names one of leases.
func reapVerdict(reply []any, leases []broker.SeenLease, l broker.Layout, key string) (broker.ReapResult, error) {
	if len(reply) == 0 {
		return broker.ReapResult{}, fmt.Errorf("redisbroker: reap: empty reply")
	}
	if n, _ := reply[0].(int64); n == 1 {
		return broker.ReapResult{Reaped: true}, nil
	}
	if len(reply) != 5 {
		return broker.ReapResult{}, fmt.Errorf("redisbroker: reap: unexpected reply %v", reply)
	}
	lane, _ := reply[1].(string)
	group, _ := reply[2].(string)
	code, _ := reply[3].(string)
	detail, _ := reply[4].(string)
	r := broker.ReapResult{Stream: lane, Group: group}
	switch code {
	case "nogroup":
		r.Reason = fmt.Sprintf("%q has entries but no consumer group", lane)
	case "pending":
		r.Reason = fmt.Sprintf("group %q has %s pending entries on %q", group, detail, lane)
	case "behind":
		delivered, last, _ := strings.Cut(detail, " ")
		r.Reason = fmt.Sprintf("group %q has been delivered up to %s of %q, whose last entry is %s", group, delivered, lane, last)
	case "unregistered":
		r.Reason = fmt.Sprintf("registered group %q has not read %q yet", group, lane)
	case "lease":
		r.Stream = ""
		r.Reason = fmt.Sprintf("the lease %s holds %s", lane, leaseText(detail))
		for _, sl := range leases {
			if l.LeaseKey(sl.Group, key) == lane {
				r.Group = sl.Group
				r.Reason = fmt.Sprintf("the lease %s of group %q holds %s, the caller saw %s", lane, sl.Group, leaseText(detail), leaseText(sl.Token))
			}
		}
	case "young":
		ms, _ := strconv.ParseInt(detail, 10, 64)
		r.Reason = fmt.Sprintf("the newest entry of %q is %s old, younger than minIdle", lane, time.Duration(ms)*time.Millisecond)
	default:
		r.Reason = code
	}
	return r, nil
}

func leaseText(token string) string {
	if token == "" {
		return "no lease"
	}
	return strconv.Quote(token)
}

// Trim removes the oldest entries of stream beyond the newest maxLen but
// never an entry at or after the safe floor (the smallest, over groups,
// of the last-delivered id and the oldest pending id), in one script. It
// trims exactly (not with ~), so the result does not depend on the
// stream's internal node sizes. Its cost is O(entries read to find the
// cutoff), bounded by the smaller of maxLen and the excess.
//
// Groups registered with RegisterGroup count too: one that has not
// created itself on stream yet will read it from id 0, so Trim removes
// nothing while such a group exists. The contract gives Trim only the
// stream's name, so the registries it consults are those of every
// category the name can belong to in the layout (see registriesOf);
// consulting one too many only keeps more.
func (b *Broker) Trim(ctx context.Context, stream string, maxLen int64) (int64, error) {
	const op = "trim"
	if err := nonEmpty(op, "stream", stream); err != nil {
		return 0, err
	}
	if err := positive(op, "maxLen", maxLen); err != nil {
		return 0, err
	}
	if b.cfg.layout.IsCluster() {
		return b.trimCluster(ctx, stream, maxLen)
	}
	keys := append([]string{stream}, b.registriesOf(stream)...)
	n, err := trimScript.Run(ctx, b.client, keys, maxLen).Int64()
	if err != nil {
		return 0, mapErr(call{Op: op, Keys: keys}, err)
	}
	return n, nil
}

// trimCluster is Trim in the cluster layout: the registries live in
// other slots than the stream, so it reads them first and passes their
// groups to trim.lua as arguments. A group registered after that read is
// not seen by this trim, as if it had registered after the trim; the
// groups present on the stream are read inside the script, atomically
// with the trim.
func (b *Broker) trimCluster(ctx context.Context, stream string, maxLen int64) (int64, error) {
	const op = "trim"
	args := []any{maxLen}
	for _, reg := range b.registriesOf(stream) {
		groups, err := b.client.SMembers(ctx, reg).Result()
		if err != nil {
			return 0, mapErr(call{Op: op, Key: reg, Want: "set"}, err)
		}
		for _, g := range groups {
			args = append(args, g)
		}
	}
	keys := []string{stream}
	n, err := trimScript.Run(ctx, b.client, keys, args...).Int64()
	if err != nil {
		return 0, mapErr(call{Op: op, Keys: keys}, err)
	}
	return n, nil
}

// registriesOf returns the group registries (Layout.GroupsKey) of the
// categories stream may belong to: C for a main lane C:K, and C for a
// lane C:K:<suffix>. Categories may contain ':' themselves, so both
// readings are taken.
func (b *Broker) registriesOf(stream string) []string {
	var out []string
	rest := stream
	for n := 0; n < 2; n++ {
		i := strings.LastIndexByte(rest, ':')
		if i <= 0 {
			break
		}
		rest = rest[:i]
		out = append(out, b.cfg.layout.GroupsKey(rest))
	}
	return out
}
