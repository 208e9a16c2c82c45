package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/internal/redisadapter"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/storecontract"
)

// Seeks: docs/decisions/0044-topic-seek.md. The keys share the lease
// group's hash tag, so a seek is one script with the lease and the
// checkpoints on Redis Cluster:
//
//	protctl:{S|N}:seeks:<sub>        HASH partition -> JSON runtime.SeekRequest
//	protctl:{S|N}:seekresults:<sub>  HASH partition -> JSON runtime.SeekResult
//	protctl:{S|N}:seeks              Pub/Sub channel: subscriptions with a new request

var _ runtime.CheckpointSeeker = (*Store)(nil)

// SeeksKey is the HASH of subscription's pending seek requests.
func (g LeaseGroup) SeeksKey(subscription string) string {
	return seeksKey(g.String(), subscription)
}

// SeekResultsKey is the HASH of the owners' answers to subscription's
// seek requests, the latest per partition.
func (g LeaseGroup) SeekResultsKey(subscription string) string {
	return prefix + "{" + g.String() + "}:seekresults:" + subscription
}

// SeeksChannel is where RequestSeek announces a request.
func (g LeaseGroup) SeeksChannel() string { return seeksChannel(g.String()) }

func seeksKey(leaseGroup, subscription string) string {
	return prefix + "{" + leaseGroup + "}:seeks:" + subscription
}

func seeksChannel(leaseGroup string) string { return prefix + "{" + leaseGroup + "}:seeks" }

// SetOutcome says what SetUnownedCheckpoint did.
type SetOutcome struct {
	// Set: the checkpoint was set.
	Set bool
	// Lease is the lease found held (not set then); "" otherwise.
	Lease string
	// Moved: the checkpoint was not the one expected (not set then);
	// Checkpoint is what it was, nil for none.
	Moved      bool
	Checkpoint *int64
	// Generation is the counter after the bump, when set.
	Generation int64
}

// SetUnownedCheckpoint sets subscription's checkpoint of partition to
// next, backwards too, in one script that first checks that nobody holds
// the partition's lease and that the checkpoint is still seen (nil: none
// was saved). It also bumps the partition's generation counter, so that
// no node's dedup memory of the partition outlives the seek.
func (s *Store) SetUnownedCheckpoint(ctx context.Context, g LeaseGroup, subscription string, partition int32, seen *int64, next int64) (SetOutcome, error) {
	const op = "set checkpoint"
	if err := g.Validate(); err != nil {
		return SetOutcome{}, err
	}
	if err := storecontract.Checkpoint(op, g.String(), subscription, partition); err != nil {
		return SetOutcome{}, err
	}
	if next < 0 {
		return SetOutcome{}, storecontract.Invalid(op, "next", strconv.FormatInt(next, 10), "must not be negative")
	}
	want := ""
	if seen != nil {
		want = strconv.FormatInt(*seen, 10)
	}
	keys := []string{g.LeaseKey(partition), g.GenerationKey(partition), g.CheckpointsKey(subscription)}
	res, err := seekSetScript.Run(ctx, s.client, keys, partition, want, strconv.FormatInt(next, 10)).StringSlice()
	if err != nil {
		return SetOutcome{}, mapErr(call{Op: op, Keys: keys}, err)
	}
	if len(res) != 2 {
		return SetOutcome{}, fmt.Errorf("redisstore: %s: unexpected reply %q", op, res)
	}
	switch res[0] {
	case "ok":
		gen, _ := strconv.ParseInt(res[1], 10, 64)
		return SetOutcome{Set: true, Generation: gen}, nil
	case "lease":
		return SetOutcome{Lease: res[1]}, nil
	}
	out := SetOutcome{Moved: true}
	if res[1] != "" {
		v, err := strconv.ParseInt(res[1], 10, 64)
		if err != nil {
			return SetOutcome{}, fmt.Errorf("redisstore: %s: partition %d of %q holds %q, not an offset", op, partition, keys[2], res[1])
		}
		out.Checkpoint = &v
	}
	return out, nil
}

// RequestAnswered is what RequestSeek returns when the owner already
// answered a request of the same id: it is not recorded again (a lease
// token is owner:generation, never "=").
const RequestAnswered = "="

// RequestSeek records req for the owner of partition to carry out, only
// while its lease is still req.Lease and no answer to req.ID is recorded,
// and announces it. It returns "" when recorded, RequestAnswered when the
// owner answered req.ID already (read it with SeekResult), or else the
// lease found instead ("-" when free). The subscription's requests hash
// expires after ttl (at least; a longer TTL set by another request is
// kept), so a request whose requester went away without withdrawing it
// (WithdrawSeek) does not stand for ever.
func (s *Store) RequestSeek(ctx context.Context, g LeaseGroup, subscription string, partition int32, req runtime.SeekRequest, ttl time.Duration) (string, error) {
	const op = "request seek"
	if err := g.Validate(); err != nil {
		return "", err
	}
	if err := storecontract.Checkpoint(op, g.String(), subscription, partition); err != nil {
		return "", err
	}
	if req.ID == "" {
		return "", storecontract.Invalid(op, "id", `""`, "must not be empty")
	}
	if ttl < time.Millisecond {
		return "", storecontract.Invalid(op, "ttl", ttl.String(), "must be at least 1ms")
	}
	raw, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	keys := []string{g.LeaseKey(partition), g.SeeksKey(subscription), g.SeekResultsKey(subscription)}
	now, err := seekRequestScript.Run(ctx, s.client, keys, req.Lease, partition, string(raw), req.ID, ttl.Milliseconds()).Text()
	if err != nil {
		return "", mapErr(call{Op: op, Keys: keys}, err)
	}
	if now != "" {
		return now, nil
	}
	// A hint only: owners also poll.
	_ = s.client.Publish(ctx, g.SeeksChannel(), subscription).Err()
	return "", nil
}

// WithdrawSeek removes the request id of partition if it is still
// pending (the owner has not answered it, no other request replaced it),
// in one script: the owner's answer (CompleteSeek) then finds nothing and
// changes nothing. It reports whether it withdrew the request.
func (s *Store) WithdrawSeek(ctx context.Context, g LeaseGroup, subscription string, partition int32, id string) (bool, error) {
	const op = "withdraw seek"
	if err := g.Validate(); err != nil {
		return false, err
	}
	if err := storecontract.Checkpoint(op, g.String(), subscription, partition); err != nil {
		return false, err
	}
	keys := []string{g.SeeksKey(subscription)}
	n, err := seekWithdrawScript.Run(ctx, s.client, keys, partition, id).Int()
	if err != nil {
		return false, mapErr(call{Op: op, Keys: keys}, err)
	}
	return n == 1, nil
}

// SeekResult returns the latest answer to a seek of partition, nil when
// there is none.
func (s *Store) SeekResult(ctx context.Context, g LeaseGroup, subscription string, partition int32) (*runtime.SeekResult, error) {
	const op = "read seek result"
	key := g.SeekResultsKey(subscription)
	v, err := s.client.HGet(ctx, key, strconv.FormatInt(int64(partition), 10)).Result()
	if isNil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, mapErr(call{Op: op, Key: key, Want: "hash"}, err)
	}
	var r runtime.SeekResult
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return nil, fmt.Errorf("redisstore: %s: partition %d of %q holds %q, not a seek result", op, partition, key, v)
	}
	return &r, nil
}

// PendingSeeks implements runtime.CheckpointSeeker: one HGETALL. A
// request that does not decode is left out.
func (s *Store) PendingSeeks(ctx context.Context, leaseGroup, subscription string) (map[int32]runtime.SeekRequest, error) {
	const op = "read seek requests"
	if err := storecontract.Checkpoint(op, leaseGroup, subscription, 0); err != nil {
		return nil, err
	}
	key := seeksKey(leaseGroup, subscription)
	all, err := s.client.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, mapErr(call{Op: op, Key: key, Want: "hash"}, err)
	}
	out := make(map[int32]runtime.SeekRequest, len(all))
	for field, v := range all {
		p, perr := strconv.ParseInt(field, 10, 32)
		var r runtime.SeekRequest
		if perr != nil || json.Unmarshal([]byte(v), &r) != nil || r.ID == "" {
			continue
		}
		out[int32(p)] = r
	}
	return out, nil
}

// WatchSeeks implements runtime.CheckpointSeeker on a confirmed Pub/Sub
// subscription of the lease group's seeks channel.
func (s *Store) WatchSeeks(ctx context.Context, leaseGroup string) (<-chan string, error) {
	const op = "watch seeks"
	if err := storecontract.Checkpoint(op, leaseGroup, "x", 0); err != nil {
		return nil, err
	}
	ch, err := redisadapter.Watch(ctx, s.client, seeksChannel(leaseGroup), s.cfg.watchBuffer)
	if err != nil {
		return nil, mapErr(call{Op: op}, err)
	}
	return ch, nil
}

// CompleteSeek implements runtime.CheckpointSeeker in one fenced script.
func (s *Store) CompleteSeek(ctx context.Context, f broker.Fence, leaseGroup, subscription string, partition int32, res runtime.SeekResult) (bool, error) {
	const op = "complete seek"
	if err := storecontract.Save(op, f, leaseGroup, subscription, partition, max(res.Next, 0)); err != nil {
		return false, err
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return false, err
	}
	next := ""
	if res.Status == runtime.SeekDone {
		next = strconv.FormatInt(res.Next, 10)
	}
	keys := []string{f.LeaseKey, checkpointsKey(leaseGroup, subscription), seeksKey(leaseGroup, subscription),
		prefix + "{" + leaseGroup + "}:seekresults:" + subscription}
	n, err := seekCompleteScript.Run(ctx, s.client, keys, f.Token, partition, res.ID, next, string(raw)).Int()
	if err != nil {
		return false, mapErr(call{Op: op, Keys: keys, Fence: &f}, err)
	}
	return n == 1, nil
}
