package redisbroker

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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
// (From: "" when the group is not created on the lane) and the target.
// From gives the seek its direction: a forward move never becomes a
// rewind (nor a rewind a skip) because the owner read on meanwhile (see
// seek.lua). SeekFree also requires the lane still at From, unless
// AnyFrom (a foreign owner read on until its lease was released).
type SeekLane struct {
	Stream  string `json:"stream"`
	From    string `json:"from,omitempty"`
	To      string `json:"to"`
	AnyFrom bool   `json:"-"`
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
	if tag := redisadapter.HashTag(l.LeaseKey(group, key)); tag != "" {
		return "protctl:{" + tag + "}:" + rest
	}
	return "protctl:" + rest
}

// SeekPreviousKey is where a seek request replaced by the next one of
// group on key is kept (same slot as SeekRequestKey), so that its
// operator, polling late, still reads what became of it.
func SeekPreviousKey(l broker.Layout, group, key string) string {
	rest := "seekprev:" + strconv.Itoa(len(group)) + ":" + group + ":" + key
	if tag := redisadapter.HashTag(l.LeaseKey(group, key)); tag != "" {
		return "protctl:{" + tag + "}:" + rest
	}
	return "protctl:" + rest
}

// SeekRequestsKey is the SET nodes re-read every renewal period (signals
// are hints) to find group's partitions with something to act on: open
// seek requests (members SeekRequestMember) and partitions a free seek
// moved (SeekWakeMember). It lives in its own slot; SeekRequests drops
// the members that are done.
func SeekRequestsKey(group string) string { return "protctl:seeks:" + group }

// SeekRequestMember is the SeekRequestsKey member of request id on key:
// "r:<len(id)>:<id>:<key>". Scoped by the id, so that removing a closed
// request's member never removes a later request's.
func SeekRequestMember(id, key string) string {
	return "r:" + strconv.Itoa(len(id)) + ":" + id + ":" + key
}

// SeekWakeMember is the SeekRequestsKey member a free seek of key at
// server time at (ms) leaves: "w:<ms>:<key>". Nodes signal the key until
// SeekWakeFor has passed, so that an idle node watching the partition
// from its old position reads from the new one without waiting for a
// Pub/Sub message or the next append.
func SeekWakeMember(at time.Time, key string) string {
	return "w:" + strconv.FormatInt(at.UnixMilli(), 10) + ":" + key
}

// SeekWakeFor is how long a SeekWakeMember is signalled: longer than any
// sane renewal period, so that every node re-reads it at least once.
const SeekWakeFor = 2 * time.Minute

// parseSeekMember reads a SeekRequestsKey member: kind 'r' (id, key),
// 'w' (at ms, key), or 0 for a bare key (an older protctl's member).
func parseSeekMember(m string) (kind byte, id string, at int64, key string) {
	if rest, ok := strings.CutPrefix(m, "r:"); ok {
		if n, after, ok := strings.Cut(rest, ":"); ok {
			if l, err := strconv.Atoi(n); err == nil && l >= 0 && len(after) > l && after[l] == ':' {
				return 'r', after[:l], 0, after[l+1:]
			}
		}
	}
	if rest, ok := strings.CutPrefix(m, "w:"); ok {
		if ms, k, ok := strings.Cut(rest, ":"); ok {
			if v, err := strconv.ParseInt(ms, 10, 64); err == nil {
				return 'w', "", v, k
			}
		}
	}
	return 0, "", 0, m
}

// SeekRequestsChannel is the Pub/Sub channel on which RequestSeek
// announces the partition key of group it recorded a request for.
func SeekRequestsChannel(group string) string { return "protctl:seeks:" + group + ":requests" }

// SeekFree moves group's position on the lanes of partition key to each
// lane's To and settles the pending entries (see seek.lua), in one step,
// while the lease is free, the generation counter is generation (nil:
// never leased) and every lane's position is its From. Otherwise it
// changes nothing and says what it found (SeekLeased, SeekMoved).
func (b *Broker) SeekFree(ctx context.Context, group, key string, generation *int64, lanes []SeekLane) (SeekOutcome, error) {
	const op = "seek"
	sc, err := b.seekFreeCall(op, SeekFreeCall{Group: group, Key: key, Generation: generation, Lanes: lanes})
	if err != nil {
		return SeekOutcome{}, err
	}
	v, err := seekScript.Run(ctx, b.client, sc.keys, sc.args...).Slice()
	if err != nil {
		return SeekOutcome{}, mapErr(call{Op: op, Keys: sc.keys}, err)
	}
	return parseSeek(v)
}

// SeekFreeReleasing is SeekFree of a partition a lease holds, taken from
// its holder (an operator's --force): in one step, while the lease holds
// exactly c.Release (or has expired since) and every other check of
// SeekFree passes, the lease is deleted and the group moved. Otherwise
// nothing changes, the lease included, and the outcome says why
// (SeekLeased: another lease or generation; SeekMoved). Releasing first
// and seeking after, in two steps, would take the partition from its
// owner even when the seek then found the state moved.
func (b *Broker) SeekFreeReleasing(ctx context.Context, c SeekFreeCall) (SeekOutcome, error) {
	const op = "seek"
	if c.Release == "" {
		return SeekOutcome{}, &broker.InvalidArgumentError{Op: op, Arg: "release", Value: `""`, Reason: "must not be empty"}
	}
	sc, err := b.seekFreeCall(op, c)
	if err != nil {
		return SeekOutcome{}, err
	}
	v, err := seekScript.Run(ctx, b.client, sc.keys, sc.args...).Slice()
	if err != nil {
		return SeekOutcome{}, mapErr(call{Op: op, Keys: sc.keys}, err)
	}
	return parseSeek(v)
}

// SeekFreeCall is one partition's free seek in SeekFreeBatch: SeekFree's
// arguments.
type SeekFreeCall struct {
	Group, Key string
	Generation *int64
	Lanes      []SeekLane
	// Release, when set, is a lease token the seek takes the partition
	// from (SeekFreeReleasing): the lease may hold exactly it, and is
	// deleted in the same step.
	Release string
}

// SeekFreeBatch runs each call as SeekFree does, pipelined (one round
// trip per batch, per master on a Cluster; see runScripts): each call is
// its own atomic step with its own checks, as if sent alone. It returns
// per call the outcome or the error; a call with invalid arguments fails
// alone, before anything is sent. Seeking thousands of free partitions
// one SeekFree at a time costs a round trip each (BenchmarkSeek10k).
func (b *Broker) SeekFreeBatch(ctx context.Context, calls []SeekFreeCall) ([]SeekOutcome, []error) {
	const op = "seek"
	outs := make([]SeekOutcome, len(calls))
	errs := make([]error, len(calls))
	sc := make([]scriptCall, 0, len(calls))
	sent := make([]int, 0, len(calls))
	for i, c := range calls {
		one, err := b.seekFreeCall(op, c)
		if err != nil {
			errs[i] = err
			continue
		}
		sc, sent = append(sc, one), append(sent, i)
	}
	if len(sc) == 0 {
		return outs, errs
	}
	cmds, _ := b.runScripts(ctx, seekScript, sc, nil)
	for j, i := range sent {
		v, err := cmds[j].Slice()
		if err != nil {
			errs[i] = mapErr(call{Op: op, Keys: sc[j].keys}, err)
			continue
		}
		outs[i], errs[i] = parseSeek(v)
	}
	return outs, errs
}

// seekFreeCall is seek.lua's "free" call for c.
func (b *Broker) seekFreeCall(op string, c SeekFreeCall) (scriptCall, error) {
	l := b.cfg.layout
	keys := []string{l.LeaseKey(c.Group, c.Key), l.GenerationKey(c.Group, c.Key), SeekRequestKey(l, c.Group, c.Key)}
	gen := ""
	if c.Generation != nil {
		gen = strconv.FormatInt(*c.Generation, 10)
	}
	mode := "free"
	if c.Release != "" {
		mode = "release"
	}
	args := []any{mode, c.Group, gen}
	for _, ln := range c.Lanes {
		keys = append(keys, ln.Stream)
		if ln.AnyFrom {
			args = append(args, "*")
		} else {
			args = append(args, ln.From)
		}
	}
	for _, ln := range c.Lanes {
		if err := validID(op, ln.To); err != nil {
			return scriptCall{}, err
		}
		args = append(args, ln.To)
	}
	for _, ln := range c.Lanes {
		args = append(args, ln.From)
	}
	if c.Release != "" {
		args = append(args, c.Release)
	}
	return scriptCall{keys: keys, args: args}, nil
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
// while the lease still holds req.Token; once recorded (only then: a
// refused request leaves nothing behind) it adds SeekRequestMember to
// SeekRequestsKey and signals SeekRequestsChannel. status is
// "requested", "exists" (this id is recorded: a resumed apply),
// SeekLeased (detail: the lease now) or "busy" (another request waits;
// detail: its id).
//
// The member is added after the record, in another slot: a node that
// lists it always finds the request (or its end), so it may drop members
// whose request is closed, gone or replaced without racing a new one. A
// caller killed between the two leaves a request nobody lists; its
// resumed apply ("exists") lists it.
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
	keys := []string{l.LeaseKey(group, key), SeekRequestKey(l, group, key), SeekPreviousKey(l, group, key)}
	v, err := seekRequestScript.Run(ctx, b.client, keys, req.Token, req.ID, req.By, string(lanes), ttl.Milliseconds()).Slice()
	if err != nil {
		return "", "", mapErr(call{Op: op, Keys: keys}, err)
	}
	status, _ = v[0].(string)
	if len(v) > 1 {
		detail = fmt.Sprint(v[1])
	}
	if status == "requested" || status == "exists" {
		if err := b.client.SAdd(ctx, SeekRequestsKey(group), SeekRequestMember(req.ID, key)).Err(); err != nil {
			return "", "", mapErr(call{Op: op, Keys: []string{SeekRequestsKey(group)}}, err)
		}
		// A lost signal costs the owner one renewal period.
		_ = b.client.Publish(ctx, SeekRequestsChannel(group), key).Err()
	}
	return status, detail, nil
}

// SeekRequestStatus reads seek request id of group on key: the waiting
// or last request, or the one it replaced; ok false when it is neither
// (never recorded, withdrawn, expired, or replaced twice).
func (b *Broker) SeekRequestStatus(ctx context.Context, group, key, id string) (SeekRequestState, bool, error) {
	l := b.cfg.layout
	for _, k := range []string{SeekRequestKey(l, group, key), SeekPreviousKey(l, group, key)} {
		m, err := b.client.HGetAll(ctx, k).Result()
		if err != nil {
			return SeekRequestState{}, false, mapErr(call{Op: "read seek request", Keys: []string{k}}, err)
		}
		if len(m) > 0 && m["id"] == id {
			return seekState(m), true, nil
		}
	}
	return SeekRequestState{}, false, nil
}

func seekState(m map[string]string) SeekRequestState {
	s := SeekRequestState{ID: m["id"], Token: m["token"], Status: m["status"], Detail: m["detail"]}
	s.Generation, _ = strconv.ParseInt(m["generation"], 10, 64)
	if ms, err := strconv.ParseInt(m["doneAt"], 10, 64); err == nil {
		s.DoneAt = time.UnixMilli(ms).UTC()
	}
	if r := m["result"]; r != "" {
		_ = json.Unmarshal([]byte(r), &s.Lanes)
	}
	return s
}

// CancelSeekRequest withdraws request id of group on key unless it was
// carried out: it returns "cancelled", the status it was carried out
// with, or "" when another request replaced it. It removes the request's
// member from SeekRequestsKey once the request is closed either way.
func (b *Broker) CancelSeekRequest(ctx context.Context, group, key, id string) (string, error) {
	k := SeekRequestKey(b.cfg.layout, group, key)
	st, err := seekCancelScript.Run(ctx, b.client, []string{k}, id).Text()
	if err != nil {
		return "", mapErr(call{Op: "cancel seek request", Keys: []string{k}}, err)
	}
	return st, b.ForgetSeekRequest(ctx, group, key, id)
}

// ForgetSeekRequest removes request id of key from SeekRequestsKey(group)
// (SeekRequestMember): the caller saw it closed. A later request of the
// key keeps its own member.
func (b *Broker) ForgetSeekRequest(ctx context.Context, group, key, id string) error {
	if err := b.client.SRem(ctx, SeekRequestsKey(group), SeekRequestMember(id, key)).Err(); err != nil {
		return mapErr(call{Op: "forget seek request", Keys: []string{SeekRequestsKey(group)}}, err)
	}
	return nil
}

// MarkSeekWake adds SeekWakeMember(at, key) to SeekRequestsKey(group):
// a free seek moved key at server time at, and the idle node watching it
// must read it again (nodes signal it for SeekWakeFor).
func (b *Broker) MarkSeekWake(ctx context.Context, group, key string, at time.Time) error {
	if err := b.client.SAdd(ctx, SeekRequestsKey(group), SeekWakeMember(at, key)).Err(); err != nil {
		return mapErr(call{Op: "mark seek", Keys: []string{SeekRequestsKey(group)}}, err)
	}
	return nil
}

// SeekRequests lists the partition keys of group with something for
// their owner to do: an open seek request, or a free seek less than
// SeekWakeFor ago (SeekRequestsKey). It removes the members that are
// done (their request closed, withdrawn, expired or replaced; a wake
// older than SeekWakeFor), so that no partition is signalled forever.
// Every node calls it every renewal period: one SMEMBERS, and one
// pipelined HGETALL per request listed.
func (b *Broker) SeekRequests(ctx context.Context, group string) ([]string, error) {
	const op = "list seek requests"
	set := SeekRequestsKey(group)
	members, err := b.client.SMembers(ctx, set).Result()
	if err != nil && err != redis.Nil {
		return nil, mapErr(call{Op: op, Keys: []string{set}}, err)
	}
	if len(members) == 0 {
		return nil, nil
	}
	var now time.Time
	type req struct {
		member, id, key string
		cmd             *redis.MapStringStringCmd
	}
	var reqs []req
	var keys, done []string
	pipe := b.client.Pipeline()
	for _, m := range members {
		kind, id, at, key := parseSeekMember(m)
		if kind == 'w' {
			if now.IsZero() {
				if now, err = b.client.Time(ctx).Result(); err != nil {
					return nil, mapErr(call{Op: op}, err)
				}
			}
			if now.Sub(time.UnixMilli(at)) < SeekWakeFor {
				keys = append(keys, key)
			} else {
				done = append(done, m)
			}
			continue
		}
		reqs = append(reqs, req{member: m, id: id, key: key, cmd: pipe.HGetAll(ctx, SeekRequestKey(b.cfg.layout, group, key))})
	}
	if len(reqs) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return nil, mapErr(call{Op: op}, err)
		}
	}
	for _, r := range reqs {
		h := r.cmd.Val()
		// A bare key (kind 0) stands for whatever request is open.
		if _, closed := h["status"]; len(h) > 0 && !closed && (r.id == "" || h["id"] == r.id) {
			keys = append(keys, r.key)
			continue
		}
		done = append(done, r.member)
	}
	if len(done) > 0 {
		if err := b.client.SRem(ctx, set, done).Err(); err != nil {
			return nil, mapErr(call{Op: op, Keys: []string{set}}, err)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
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
