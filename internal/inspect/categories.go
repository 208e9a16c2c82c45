package inspect

import (
	"context"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

const indexSuffix = ":__partitions__"

func (in *Inspector) categories(ctx context.Context, opts ScanOptions) ([]Category, error) {
	seen := map[string]bool{}
	var names []string
	err := in.scanKeys(ctx, "*"+indexSuffix, "set", opts, func(key string) bool {
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
