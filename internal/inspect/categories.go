package inspect

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

const indexSuffix = ":__partitions__"

func (in *Inspector) categories(ctx context.Context, opts ScanOptions) ([]Category, error) {
	seen := map[string]bool{}
	var names []string
	// No TYPE filter: an index key of another type must be reported (its
	// SCARD below fails naming it), not skipped as if it were not there.
	err := in.scanKeys(ctx, "*"+indexSuffix, "", opts, func(key string) bool {
		name, ok := strings.CutSuffix(key, indexSuffix)
		if !ok || name == "" || seen[name] {
			return false
		}
		seen[name] = true
		names = append(names, name)
		return true
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return in.categoryInfos(ctx, names)
}

func (in *Inspector) categoryInfo(ctx context.Context, category string) (Category, error) {
	if err := in.layout.ValidateName("category info", "category", category); err != nil {
		return Category{}, err
	}
	cs, err := in.categoryInfos(ctx, []string{category})
	if err != nil {
		return Category{}, err
	}
	return cs[0], nil
}

// categoryInfos reads the index sizes and registries of names in one
// pipeline.
func (in *Inspector) categoryInfos(ctx context.Context, names []string) ([]Category, error) {
	const op = "category info"
	out := make([]Category, len(names))
	if len(names) == 0 {
		return out, nil
	}
	p := in.client.Pipeline()
	cards := make([]*redis.IntCmd, len(names))
	groups := make([]*redis.StringSliceCmd, len(names))
	for i, n := range names {
		cards[i] = p.SCard(ctx, in.layout.IndexKey(n))
		groups[i] = p.SMembers(ctx, in.layout.GroupsKey(n))
	}
	if _, err := p.Exec(ctx); pipeErr(op, err) != nil {
		return nil, pipeErr(op, err)
	}
	for i, n := range names {
		c, err := cards[i].Result()
		if err != nil {
			return nil, wrapErr(op, in.layout.IndexKey(n), "set", err)
		}
		g, err := groups[i].Result()
		if err != nil {
			return nil, wrapErr(op, in.layout.GroupsKey(n), "set", err)
		}
		slices.Sort(g)
		if g == nil {
			g = []string{}
		}
		out[i] = Category{Name: n, Partitions: c, Groups: g}
	}
	return out, nil
}

// errFound stops categoryKnown's scan at the first key.
var errFound = errors.New("found")

// categoryKnown reports whether category has left a trace in Redis: its
// index, its group registry, or any key named category:* (a lane, a
// dead-letter stream), the last found by a paced SCAN that stops at the
// first match (so a category that is known costs little; only a name
// nothing matches walks the whole keyspace, once, on the way to "not
// found"). Generation counters (G:K:__generation__) do not name their
// category, so they cannot make one known.
func (in *Inspector) categoryKnown(ctx context.Context, category string) (bool, error) {
	const op = "find category"
	if err := in.layout.ValidateName(op, "category", category); err != nil {
		return false, err
	}
	n, err := in.client.Exists(ctx, in.layout.IndexKey(category), in.layout.GroupsKey(category)).Result()
	if err != nil {
		return false, wrapErr(op, in.layout.IndexKey(category), "", err)
	}
	if n > 0 {
		return true, nil
	}
	return in.scanFound(ctx, escapeGlob(category+":")+"*", nil)
}
