package inspect

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

// fsck finds orphans in two passes: a paced SCAN for category:* streams
// whose partition key is not in the index (checked with SMISMEMBER in
// batches), then an SSCAN of the index for keys with neither lane; a
// third pass lists the stale consumers of the streams the scan found.
func (in *Inspector) fsck(ctx context.Context, category string, opts ScanOptions) (FsckReport, error) {
	const op = "fsck"
	if err := in.layout.ValidateName(op, "category", category); err != nil {
		return FsckReport{}, err
	}
	rep := FsckReport{Category: category, Orphans: []Orphan{}}
	index := in.layout.IndexKey(category)
	prefix := category + ":"

	// Pass 1: streams of the category, by key.
	type found struct{ key, stream string }
	var streams []found
	seen := map[string]bool{}
	err := in.scanKeys(ctx, escapeGlob(prefix)+"*", "stream", opts, func(s string) bool {
		key, ok := in.partitionOfStream(prefix, s)
		if !ok || seen[s] {
			return false
		}
		seen[s] = true
		streams = append(streams, found{key, s})
		return true
	})
	if err != nil {
		return FsckReport{}, err
	}
	rep.Streams = int64(len(streams))
	for start := 0; start < len(streams); start += in.cfg.chunk {
		batch := streams[start:min(start+in.cfg.chunk, len(streams))]
		members := make([]any, len(batch))
		for i, f := range batch {
			members[i] = f.key
		}
		p := in.client.Pipeline()
		is := p.SMIsMember(ctx, index, members...)
		lens := make([]*redis.IntCmd, len(batch))
		for i, f := range batch {
			lens[i] = p.XLen(ctx, f.stream)
		}
		if _, err := p.Exec(ctx); pipeErr(op, err) != nil {
			return FsckReport{}, pipeErr(op, err)
		}
		member, err := is.Result()
		if err != nil {
			return FsckReport{}, wrapErr(op, index, "set", err)
		}
		for i, f := range batch {
			if !member[i] {
				rep.Orphans = append(rep.Orphans, Orphan{Kind: OrphanUnindexedStream, Category: category, Key: f.key, Stream: f.stream, Length: lens[i].Val()})
			}
		}
	}

	// Pass 2: index entries without a lane.
	var cursor uint64
	checked := map[string]bool{}
	for {
		keys, next, err := in.client.SScan(ctx, index, cursor, "", max(opts.Count, 1000)).Result()
		if err != nil {
			return FsckReport{}, wrapErr(op, index, "set", err)
		}
		var batch []string
		for _, k := range keys {
			if !checked[k] {
				checked[k] = true
				batch = append(batch, k)
			}
		}
		if len(batch) > 0 {
			// TYPE rather than EXISTS: a lane key of another type is not
			// a partition stream, and is reported as such.
			p := in.client.Pipeline()
			types := make([][2]*redis.StatusCmd, len(batch))
			for i, k := range batch {
				types[i] = [2]*redis.StatusCmd{p.Type(ctx, in.layout.Stream(category, k)), p.Type(ctx, in.layout.LaneStream(category, k, in.cfg.backfill))}
			}
			if _, err := p.Exec(ctx); pipeErr(op, err) != nil {
				return FsckReport{}, pipeErr(op, err)
			}
			for i, k := range batch {
				lanes := [2]string{in.layout.Stream(category, k), in.layout.LaneStream(category, k, in.cfg.backfill)}
				streams, wrong := 0, false
				for j, c := range types[i] {
					switch t := c.Val(); t {
					case "stream":
						streams++
					case "none", "":
					default:
						rep.Orphans = append(rep.Orphans, Orphan{Kind: OrphanWrongType, Category: category, Key: k, Stream: lanes[j], Type: t})
						wrong = true
					}
				}
				if streams == 0 && !wrong {
					rep.Orphans = append(rep.Orphans, Orphan{Kind: OrphanMissingStream, Category: category, Key: k, Stream: lanes[0]})
				}
			}
		}
		cursor = next
		if cursor == 0 {
			break
		}
	}
	rep.Indexed = int64(len(checked))

	// Pass 3: consumers of the streams found that are stale.
	lanes := make([]laneRef, len(streams))
	for i, f := range streams {
		lanes[i] = laneRef{f.key, f.stream}
	}
	if rep.StaleConsumers, err = in.staleConsumers(ctx, category, lanes); err != nil {
		return FsckReport{}, err
	}
	slices.SortFunc(rep.Orphans, func(a, b Orphan) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Stream, b.Stream))
	})
	return rep, nil
}

// partitionOfStream reads the partition key of a stream named
// <category>:K or <category>:K:<backfill> (K in braces in the cluster
// layout). Dead-letter streams (C:K:dlq), the category's own streams
// under a reserved name (broker.ReservedKey: Protean's C:dlq,
// C:<backfill>, C:__x__) and streams of longer category names that share
// the prefix are not partitions of this category.
func (in *Inspector) partitionOfStream(prefix, stream string) (string, bool) {
	rest, ok := strings.CutPrefix(stream, prefix)
	if !ok || rest == "" {
		return "", false
	}
	key, suffix, hasSuffix := strings.Cut(rest, ":")
	if hasSuffix && suffix != in.cfg.backfill {
		return "", false
	}
	if in.layout.IsCluster() {
		if len(key) < 2 || key[0] != '{' || key[len(key)-1] != '}' {
			return "", false
		}
		key = key[1 : len(key)-1]
	}
	if key == "" || broker.ReservedKey(key, in.cfg.backfill) {
		return "", false
	}
	return key, true
}
