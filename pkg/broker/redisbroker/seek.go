package redisbroker

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/internal/redisadapter"
)

// Seek statuses: what a seek step found (SeekOutcome.Status).
const (
	// SeekApplied: the positions moved and the pending entries were
	// settled.
	SeekApplied = "applied"
	// SeekLeased: SeekFree found a lease, or a generation the plan did
	// not see.
	SeekLeased = "leased"
	// SeekMoved: SeekFree found a lane's position other than planned.
	SeekMoved = "moved"
	// SeekNone: ApplySeekRequest found no request waiting.
	SeekNone = "none"
	// SeekConflict: the request waiting was made against another lease
	// than the caller's; it is closed as a conflict.
	SeekConflict = "conflict"
)

// SeekLane is one lane of a seek: the group's position the plan saw
// (From: "" when the group is not created on the lane, "*" for any) and
// the target.
type SeekLane struct {
	Stream string `json:"stream"`
	From   string `json:"from,omitempty"`
	To     string `json:"to"`
}

// SeekLaneResult is what a seek did on a lane: the position it found
// (From) and set (To), the pending entries it acked (after the target,
// to be delivered again, or skipped by a forward move) and those it kept
// (at or before a rewind's target).
type SeekLaneResult struct {
	Stream string `json:"stream"`
	From   string `json:"from"`
	To     string `json:"to"`
	Acked  int64  `json:"acked"`
	Kept   int64  `json:"kept"`
}

// SeekOutcome is a seek step's result. Detail is the lease value seen
// (SeekLeased), the lane and its position now (SeekMoved) or the lease
// the request was made against (SeekConflict).
type SeekOutcome struct {
	Status string
	Detail string
	Lanes  []SeekLaneResult
}

// SeekRequestKey is where an operator's seek of group on partition key
// waits for the partition's owner: protctl:{<tag>}:seek:<len>:<group>:<key>,
// in the lease's slot (the lease key's hash tag, when it has one) so that
// the owner's script checks its lease, moves the lanes and records the
// result in one step; the group's length keeps two (group, key) pairs
// from spelling one key.
func SeekRequestKey(l broker.Layout, group, key string) string {
	rest := "seek:" + strconv.Itoa(len(group)) + ":" + group + ":" + key
	if tag := hashTag(l.LeaseKey(group, key)); tag != "" {
		return "protctl:{" + tag + "}:" + rest
	}
	return "protctl:" + rest
}

// SeekRequestsKey is the SET of group's partition keys with a seek
// request, which owners re-read every renewal period (signals are
// hints). It lives in its own slot.
func SeekRequestsKey(group string) string { return "protctl:seeks:" + group }

// SeekRequestsChannel is the Pub/Sub channel on which RequestSeek
// announces the partition key of group it recorded a request for.
func SeekRequestsChannel(group string) string { return "protctl:seeks:" + group + ":requests" }

// hashTag is the part of key Redis Cluster hashes, "" for none.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return ""
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return ""
	}
	return key[open+1 : open+1+end]
}

// SeekFree moves group's position on the lanes of partition key to each
// lane's To and settles the pending entries (see seek.lua), in one step,
// while the lease is free, the generation counter is generation (nil:
// never leased) and every lane's position is its From. Otherwise it
// changes nothing and says what it found (SeekLeased, SeekMoved).
func (b *Broker) SeekFree(ctx context.Context, group, key string, generation *int64, lanes []SeekLane) (SeekOutcome, error) {
	const op = "seek"
	l := b.cfg.layout
	keys := []string{l.LeaseKey(group, key), l.GenerationKey(group, key), SeekRequestKey(l, group, key)}
	gen := ""
	if generation != nil {
		gen = strconv.FormatInt(*generation, 10)
	}
	args := []any{"free", group, gen}
	for _, ln := range lanes {
		keys = append(keys, ln.Stream)
		args = append(args, ln.From)
	}
	for _, ln := range lanes {
		if err := validID(op, ln.To); err != nil {
			return SeekOutcome{}, err
		}
		args = append(args, ln.To)
	}
	v, err := seekScript.Run(ctx, b.client, keys, args...).Slice()
	if err != nil {
		return SeekOutcome{}, mapErr(call{Op: op, Keys: keys}, err)
	}
	return parseSeek(v)
}

// ApplySeekRequest carries out the seek request waiting for group on
// partition key, if any, under the caller's fence f (its lease, at
// generation gen): streams are the lanes the caller reads. It reports
// SeekNone when nothing waits, SeekConflict (recorded in the request)
// when the request was made against another lease, and SeekApplied with
// the lanes moved. broker.ErrLeaseLost when f no longer holds.
func (b *Broker) ApplySeekRequest(ctx context.Context, f broker.Fence, gen int64, group, key string, streams []string) (SeekOutcome, error) {
	const op = "apply seek request"
	if err := validFence(op, f); err != nil {
		return SeekOutcome{}, err
	}
	l := b.cfg.layout
	keys := append([]string{f.LeaseKey, l.GenerationKey(group, key), SeekRequestKey(l, group, key)}, streams...)
	v, err := seekScript.Run(ctx, b.client, keys, "request", group, f.Token, gen).Slice()
	if err != nil {
		return SeekOutcome{}, mapErr(call{Op: op, Keys: keys, Fence: &f}, err)
	}
	return parseSeek(v)
}

func parseSeek(v []any) (SeekOutcome, error) {
	var o SeekOutcome
	if len(v) == 0 {
		return o, fmt.Errorf("redisbroker: seek: empty reply")
	}
	o.Status, _ = v[0].(string)
	if o.Status != SeekApplied {
		var parts []string
		for _, x := range v[1:] {
			parts = append(parts, fmt.Sprint(x))
		}
		o.Detail = strings.Join(parts, " ")
		return o, nil
	}
	for _, x := range v[1:] {
		r, ok := x.([]any)
		if !ok || len(r) != 5 {
			return o, fmt.Errorf("redisbroker: seek: unexpected lane reply %v", x)
		}
		lr := SeekLaneResult{}
		lr.Stream, _ = r[0].(string)
		lr.From, _ = r[1].(string)
		lr.To, _ = r[2].(string)
		lr.Acked, _ = r[3].(int64)
		lr.Kept, _ = r[4].(int64)
		o.Lanes = append(o.Lanes, lr)
	}
	return o, nil
}

// SeekRequest is an operator's seek for the owner of a partition to carry
// out: made against the lease Token the plan saw.
type SeekRequest struct {
	ID    string
	Token string
	By    string
	Lanes []SeekLane
	// TTL bounds how long the record lives, carried out or not.
	TTL time.Duration
}

// SeekRequestState is a seek request's record: Status is "" while it
// waits, then SeekApplied or SeekConflict, with the owner's generation,
// the time it was done (server clock) and the lanes moved.
type SeekRequestState struct {
	ID         string
	Token      string
	Status     string
	Detail     string
	Generation int64
	DoneAt     time.Time
	Lanes      []SeekLaneResult
}

// RequestSeek records req for the owner of partition key of group,
// while the lease still holds req.Token, adds key to SeekRequestsKey and
// signals SeekRequestsChannel. status is "requested", "exists" (this id
// is recorded: a resumed apply), SeekLeased (detail: the lease now) or
// "busy" (another request waits; detail: its id).
func (b *Broker) RequestSeek(ctx context.Context, group, key string, req SeekRequest) (status, detail string, err error) {
	const op = "request seek"
	l := b.cfg.layout
	lanes, err := json.Marshal(req.Lanes)
	if err != nil {
		return "", "", err
	}
	ttl := req.TTL
	if ttl <= 0 {
		ttl = 24 * time.Hour
	}
	// The set first: an owner that finds the key listed without a
	// request finds nothing to do; a request not listed would wait for
	// a signal only.
	if err := b.client.SAdd(ctx, SeekRequestsKey(group), key).Err(); err != nil {
		return "", "", mapErr(call{Op: op, Keys: []string{SeekRequestsKey(group)}}, err)
	}
	keys := []string{l.LeaseKey(group, key), SeekRequestKey(l, group, key)}
	v, err := seekRequestScript.Run(ctx, b.client, keys, req.Token, req.ID, req.By, string(lanes), ttl.Milliseconds()).Slice()
	if err != nil {
		return "", "", mapErr(call{Op: op, Keys: keys}, err)
	}
	status, _ = v[0].(string)
	if len(v) > 1 {
		detail = fmt.Sprint(v[1])
	}
	if status == "requested" || status == "exists" {
		// A lost signal costs the owner one renewal period.
		_ = b.client.Publish(ctx, SeekRequestsChannel(group), key).Err()
	}
	return status, detail, nil
}

// SeekRequestStatus reads the seek request of group on key; ok false
// when there is none.
func (b *Broker) SeekRequestStatus(ctx context.Context, group, key string) (SeekRequestState, bool, error) {
	k := SeekRequestKey(b.cfg.layout, group, key)
	m, err := b.client.HGetAll(ctx, k).Result()
	if err != nil {
		return SeekRequestState{}, false, mapErr(call{Op: "read seek request", Keys: []string{k}}, err)
	}
	if len(m) == 0 {
		return SeekRequestState{}, false, nil
	}
	s := SeekRequestState{ID: m["id"], Token: m["token"], Status: m["status"], Detail: m["detail"]}
	s.Generation, _ = strconv.ParseInt(m["generation"], 10, 64)
	if ms, err := strconv.ParseInt(m["doneAt"], 10, 64); err == nil {
		s.DoneAt = time.UnixMilli(ms).UTC()
	}
	if r := m["result"]; r != "" {
		_ = json.Unmarshal([]byte(r), &s.Lanes)
	}
	return s, true, nil
}

// CancelSeekRequest withdraws request id of group on key unless it was
// carried out: it returns "cancelled", the status it was carried out
// with, or "" when another request replaced it. It removes key from
// SeekRequestsKey once the request is closed either way.
func (b *Broker) CancelSeekRequest(ctx context.Context, group, key, id string) (string, error) {
	k := SeekRequestKey(b.cfg.layout, group, key)
	st, err := seekCancelScript.Run(ctx, b.client, []string{k}, id).Text()
	if err != nil {
		return "", mapErr(call{Op: "cancel seek request", Keys: []string{k}}, err)
	}
	return st, b.ForgetSeekRequest(ctx, group, key)
}

// ForgetSeekRequest removes key from SeekRequestsKey(group): the caller
// saw its request closed.
func (b *Broker) ForgetSeekRequest(ctx context.Context, group, key string) error {
	if err := b.client.SRem(ctx, SeekRequestsKey(group), key).Err(); err != nil {
		return mapErr(call{Op: "forget seek request", Keys: []string{SeekRequestsKey(group)}}, err)
	}
	return nil
}

// SeekRequests lists the partition keys of group with a seek request
// (SeekRequestsKey); some may be closed already.
func (b *Broker) SeekRequests(ctx context.Context, group string) ([]string, error) {
	keys, err := b.client.SMembers(ctx, SeekRequestsKey(group)).Result()
	if err != nil && err != redis.Nil {
		return nil, mapErr(call{Op: "list seek requests", Keys: []string{SeekRequestsKey(group)}}, err)
	}
	return keys, nil
}

// WatchSeekRequests subscribes to SeekRequestsChannel(group), confirmed
// before it returns, and sends the partition key of every request
// signalled until ctx ends. Signals are hints: owners also re-read
// SeekRequests.
func (b *Broker) WatchSeekRequests(ctx context.Context, group string) (<-chan string, error) {
	ch, err := redisadapter.Watch(ctx, b.client, SeekRequestsChannel(group), 1024)
	if err != nil {
		return nil, mapErr(call{Op: "watch seek requests"}, err)
	}
	return ch, nil
}

// ApplyPartitionSeek is ApplySeekRequest for the runtime
// (broker.PartitionSeeker): moved is true when the request was carried
// out.
func (b *Broker) ApplyPartitionSeek(ctx context.Context, f broker.Fence, gen int64, group, key string, streams []string) (bool, error) {
	o, err := b.ApplySeekRequest(ctx, f, gen, group, key, streams)
	return o.Status == SeekApplied, err
}
