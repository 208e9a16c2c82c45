package inspect

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

const (
	leaseSuffix      = ":__lease__"
	generationSuffix = ":__generation__"
)

type groupKey struct{ group, key string }

func (in *Inspector) leases(ctx context.Context, q LeaseQuery) ([]Lease, error) {
	var out []Lease
	if len(q.Categories) > 0 {
		for _, c := range q.Categories {
			keep := func(p *Partition) bool { return q.Key == "" || p.Key == q.Key }
			if q.Key != "" {
				// One partition: no need to walk the index.
				w, err := in.newWalk(ctx, "list leases", c, q.Group, false)
				if err != nil {
					return nil, err
				}
				parts, err := in.readChunk(ctx, w, []string{q.Key})
				if err != nil {
					return nil, err
				}
				for i := range parts {
					out = append(out, in.leasesOf(&parts[i])...)
				}
				continue
			}
			err := in.EachPartition(ctx, c, PartitionOptions{Group: q.Group, Filter: keep}, func(p Partition) error {
				out = append(out, in.leasesOf(&p)...)
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
		if err := in.leaseTypes(ctx, out); err != nil {
			return nil, err
		}
	} else {
		seen := map[groupKey]bool{}
		var pairs []groupKey
		// No TYPE filter: a lease or generation key of another type must
		// fail the read below naming it, not vanish from the listing.
		err := in.scanKeys(ctx, "*:__*__", "", q.Scan, func(k string) bool {
			gk, ok := in.parseLeaseKey(k)
			if !ok || seen[gk] || (q.Group != "" && gk.group != q.Group) || (q.Key != "" && gk.key != q.Key) {
				return false
			}
			seen[gk] = true
			pairs = append(pairs, gk)
			return true
		})
		if err != nil {
			return nil, err
		}
		out, err = in.readLeases(ctx, pairs)
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b Lease) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Key, b.Key), cmp.Compare(deref(a.Category), deref(b.Category)))
	})
	return out, nil
}

func (in *Inspector) lease(ctx context.Context, group, key string) (Lease, error) {
	ls, err := in.readLeases(ctx, []groupKey{{group, key}})
	if err != nil {
		return Lease{}, err
	}
	return ls[0], nil
}

// parseLeaseKey reads (group, key) from G:K:__lease__ or
// G:K:__generation__ (G:{K}:... in the cluster layout). Partition keys
// never contain ':', so the key is after the last ':'.
func (in *Inspector) parseLeaseKey(k string) (groupKey, bool) {
	rest, ok := strings.CutSuffix(k, leaseSuffix)
	if !ok {
		if rest, ok = strings.CutSuffix(k, generationSuffix); !ok {
			return groupKey{}, false
		}
	}
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 || i == len(rest)-1 {
		return groupKey{}, false
	}
	g, key := rest[:i], rest[i+1:]
	if in.layout.IsCluster() {
		if len(key) < 2 || key[0] != '{' || key[len(key)-1] != '}' {
			return groupKey{}, false
		}
		key = key[1 : len(key)-1]
	}
	return groupKey{g, key}, true
}

// readLeases reads the leases of pairs in one pipeline.
func (in *Inspector) readLeases(ctx context.Context, pairs []groupKey) ([]Lease, error) {
	const op = "read leases"
	out := make([]Lease, 0, len(pairs))
	for start := 0; start < len(pairs); start += in.cfg.chunk * 4 {
		end := min(start+in.cfg.chunk*4, len(pairs))
		p := in.client.Pipeline()
		type cmds struct {
			lease, gen *redis.StringCmd
			pttl       *redis.DurationCmd
		}
		cs := make([]cmds, end-start)
		for i, gk := range pairs[start:end] {
			lk := in.layout.LeaseKey(gk.group, gk.key)
			cs[i] = cmds{lease: p.Get(ctx, lk), pttl: p.PTTL(ctx, lk), gen: p.Get(ctx, in.layout.GenerationKey(gk.group, gk.key))}
		}
		if _, err := p.Exec(ctx); pipeErr(op, err) != nil {
			return nil, pipeErr(op, err)
		}
		for i, gk := range pairs[start:end] {
			lk := in.layout.LeaseKey(gk.group, gk.key)
			r := leaseRead{}
			if d, err := cs[i].pttl.Result(); err == nil {
				r.pttl, r.pttlOK = ttlMs(d), true
			}
			for _, c := range []struct {
				cmd *redis.StringCmd
				key string
				dst *any
			}{{cs[i].lease, lk, &r.lease}, {cs[i].gen, in.layout.GenerationKey(gk.group, gk.key), &r.gen}} {
				v, err := c.cmd.Result()
				switch {
				case err == nil:
					*c.dst = v
				case err != redis.Nil:
					return nil, wrapErr(op, c.key, "string", err)
				}
			}
			li, gen := leaseOf(r)
			// A scan does not know the partition's streams: released and
			// expired cannot be told apart.
			out = append(out, leaseRow("", gk.group, gk.key, lk, li, gen, LeaseUnheld))
		}
	}
	return out, nil
}

// leaseTypes fails with a *broker.WrongTypeError for the first lease or
// generation key of rows that holds another type than a string. The
// partition walk reads them with MGET, which answers nil for such a key
// (a lease that would read as free); a TYPE of each key that read nil,
// pipelined, tells them apart.
func (in *Inspector) leaseTypes(ctx context.Context, rows []Lease) error {
	const op = "list leases"
	type check struct {
		key string
		cmd *redis.StatusCmd
	}
	var checks []check
	p := in.client.Pipeline()
	for _, l := range rows {
		if l.Token == nil {
			checks = append(checks, check{l.LeaseKey, p.Type(ctx, l.LeaseKey)})
		}
		if l.Counter == nil {
			gk := in.layout.GenerationKey(l.Group, l.Key)
			checks = append(checks, check{gk, p.Type(ctx, gk)})
		}
	}
	if len(checks) == 0 {
		return nil
	}
	if _, err := p.Exec(ctx); pipeErr(op, err) != nil {
		return pipeErr(op, err)
	}
	for _, c := range checks {
		if t := c.cmd.Val(); t != "" && t != "none" && t != "string" {
			return &broker.WrongTypeError{Op: op, Key: c.key, Want: "string", Got: t}
		}
	}
	return nil
}

// leasesOf turns a partition's groups into lease rows.
func (in *Inspector) leasesOf(p *Partition) []Lease {
	out := make([]Lease, 0, len(p.Groups))
	for _, g := range p.Groups {
		out = append(out, leaseRow(p.Category, g.Name, p.Key, in.layout.LeaseKey(g.Name, p.Key), g.Lease, g.Generation, g.LeaseState))
	}
	return out
}

// deref is *s, or "" for nil.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// leaseRow is a lease row; unheld is the state of a lease that is not
// held but was (the group's LeaseState when the partition was read), or
// LeaseUnknown when a key could not be read.
func leaseRow(category, group, key, leaseKey string, li *LeaseInfo, counter *int64, unheld LeaseState) Lease {
	l := Lease{Group: group, Key: key, LeaseKey: leaseKey, Counter: counter}
	if category != "" {
		l.Category = &category
	}
	switch {
	case li != nil:
		l.State = LeaseHeld
		l.Owner, l.Generation, l.TTLMs, l.Token = ptr(li.Owner), ptr(li.Generation), li.TTLMs, ptr(li.Token)
	case counter != nil:
		l.State = unheld
		l.Generation = counter
	case unheld == LeaseUnknown:
		l.State = LeaseUnknown
	default:
		l.State = LeaseFree
	}
	return l
}
