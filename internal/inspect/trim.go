package inspect

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

// trimInfo mirrors the broker's trim script (redisbroker/trim.lua) with
// reads only: the newest maxLen entries stay, and so does everything at
// or after the safe floor, the smallest over groups of the
// last-delivered id and the oldest pending id; a registered group not
// created on the stream pins everything. The reads are pipelined but not
// one atomic step: the result is a plan, and the broker's Trim
// recomputes it atomically when applied.
func (in *Inspector) trimInfo(ctx context.Context, stream string, maxLen int64) (TrimInfo, error) {
	const op = "trim info"
	if stream == "" {
		return TrimInfo{}, &broker.InvalidArgumentError{Op: op, Arg: "stream", Value: `""`, Reason: "must not be empty"}
	}
	if maxLen <= 0 {
		return TrimInfo{}, &broker.InvalidArgumentError{Op: op, Arg: "maxLen", Value: strconv.FormatInt(maxLen, 10), Reason: "must be positive"}
	}
	ti := TrimInfo{Stream: stream, MaxLen: maxLen, Groups: []GroupPosition{}, MissingGroups: []string{}}

	regs := registriesOf(in.layout, stream)
	p := in.client.Pipeline()
	typ := p.Type(ctx, stream)
	length := p.XLen(ctx, stream)
	first := p.XRangeN(ctx, stream, "-", "+", 1)
	last := p.XRevRangeN(ctx, stream, "+", "-", 1)
	groups := p.XInfoGroups(ctx, stream)
	regCmds := make([]*redis.StringSliceCmd, len(regs))
	for i, r := range regs {
		regCmds[i] = p.SMembers(ctx, r)
	}
	if _, err := p.Exec(ctx); pipeErr(op, err) != nil {
		return TrimInfo{}, pipeErr(op, err)
	}
	switch t := typ.Val(); t {
	case "none":
		ti.Reason = "the stream does not exist"
		return ti, nil
	case "stream":
	default:
		return TrimInfo{}, &broker.WrongTypeError{Op: op, Key: stream, Want: "stream", Got: t}
	}
	ti.Exists = true
	ti.Length = length.Val()
	if m := first.Val(); len(m) > 0 {
		ti.FirstEntryID = ptr(m[0].ID)
	}
	if m := last.Val(); len(m) > 0 {
		ti.LastEntryID = ptr(m[0].ID)
	}
	gs, err := groups.Result()
	if err != nil {
		return TrimInfo{}, wrapErr(op, stream, "stream", err)
	}
	present := map[string]bool{}
	for _, g := range gs {
		present[g.Name] = true
	}
	for i, c := range regCmds {
		names, err := c.Result()
		if err != nil {
			return TrimInfo{}, wrapErr(op, regs[i], "set", err)
		}
		for _, n := range names {
			if !present[n] && !slices.Contains(ti.MissingGroups, n) {
				ti.MissingGroups = append(ti.MissingGroups, n)
			}
		}
	}
	slices.Sort(ti.MissingGroups)

	// Oldest pending id per group (XPENDING summary form).
	pp := in.client.Pipeline()
	pend := make([]*redis.XPendingCmd, len(gs))
	for i, g := range gs {
		if g.Pending > 0 {
			pend[i] = pp.XPending(ctx, stream, g.Name)
		}
	}
	if _, err := pp.Exec(ctx); pipeErr(op, err) != nil {
		return TrimInfo{}, pipeErr(op, err)
	}
	for i, g := range gs {
		pos := GroupPosition{Name: g.Name, LastDeliveredID: g.LastDeliveredID, Pending: g.Pending, Floor: g.LastDeliveredID}
		if pend[i] != nil {
			if s, err := pend[i].Result(); err == nil && s.Lower != "" {
				pos.OldestPendingID = ptr(s.Lower)
				if idCompare(s.Lower, pos.Floor) < 0 {
					pos.Floor = s.Lower
				}
			}
		}
		ti.Groups = append(ti.Groups, pos)
		if ti.Floor == nil || idCompare(pos.Floor, *ti.Floor) < 0 {
			ti.Floor, ti.PinnedBy = ptr(pos.Floor), ptr(g.Name)
		}
	}
	slices.SortFunc(ti.Groups, func(a, b GroupPosition) int { return strings.Compare(a.Name, b.Name) })

	switch {
	case ti.Length <= maxLen:
		ti.PinnedBy = nil
		ti.Reason = fmt.Sprintf("the stream has %d entries, not more than maxLen %d", ti.Length, maxLen)
		return ti, nil
	case len(ti.MissingGroups) > 0:
		ti.PinnedBy = ptr(ti.MissingGroups[0])
		ti.Reason = fmt.Sprintf("registered group %q has not read the stream yet (it will read from 0): nothing may be removed", ti.MissingGroups[0])
		return ti, nil
	case len(gs) == 0:
		ti.Removes = ti.Length - maxLen
		ti.Reason = fmt.Sprintf("no consumer group: the oldest %d entries beyond maxLen %d go", ti.Removes, maxLen)
		return ti, nil
	}
	// The cutoff is the entry at index len-maxLen: the oldest kept by maxLen.
	drop := ti.Length - maxLen
	var cutoff string
	if drop < maxLen {
		m, err := in.client.XRangeN(ctx, stream, "-", "+", drop+1).Result()
		if err != nil || int64(len(m)) < drop+1 {
			return TrimInfo{}, wrapErr(op, stream, "stream", err)
		}
		cutoff = m[len(m)-1].ID
	} else {
		m, err := in.client.XRevRangeN(ctx, stream, "+", "-", maxLen).Result()
		if err != nil || int64(len(m)) < maxLen {
			return TrimInfo{}, wrapErr(op, stream, "stream", err)
		}
		cutoff = m[len(m)-1].ID
	}
	if idCompare(*ti.Floor, cutoff) >= 0 {
		ti.Removes = drop
		ti.PinnedBy = nil
		ti.Reason = fmt.Sprintf("every group has read and acked past the cutoff %s: the oldest %d entries go", cutoff, drop)
		return ti, nil
	}
	n, err := in.countBefore(ctx, stream, *ti.Floor, drop)
	if err != nil {
		return TrimInfo{}, err
	}
	ti.Removes = n
	ti.Reason = fmt.Sprintf("group %q still needs entries from %s (its floor): %d of the %d entries beyond maxLen %d go",
		*ti.PinnedBy, *ti.Floor, n, drop, maxLen)
	return ti, nil
}

// countBefore counts the entries of stream with an id below floor,
// reading at most limit of them, in pages.
func (in *Inspector) countBefore(ctx context.Context, stream, floor string, limit int64) (int64, error) {
	if id, err := broker.ParseStreamID(floor); err == nil && id.IsZero() {
		return 0, nil // nothing sorts before 0-0 ("(0-0" is not a valid end)
	}
	var n int64
	start := "-"
	for n < limit {
		page := min(limit-n, 10000)
		m, err := in.client.XRangeN(ctx, stream, start, "("+floor, page).Result()
		if err != nil {
			return 0, wrapErr("trim info", stream, "stream", err)
		}
		n += int64(len(m))
		if int64(len(m)) < page {
			break
		}
		start = "(" + m[len(m)-1].ID
	}
	return n, nil
}

// registriesOf returns the group registries of the categories stream may
// belong to (C for C:K and for C:K:<suffix>), as the broker's Trim does.
func registriesOf(l broker.Layout, stream string) []string {
	var out []string
	rest := stream
	for n := 0; n < 2; n++ {
		i := strings.LastIndexByte(rest, ':')
		if i <= 0 {
			break
		}
		rest = rest[:i]
		out = append(out, l.GroupsKey(rest))
	}
	return out
}
