package repair

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

// Seeker is what a seek needs of the broker beyond Broker
// (redisbroker.Broker implements it): the fenced seek of a free
// partition, and the requests a protctl owner carries out.
type Seeker interface {
	SeekFree(ctx context.Context, group, key string, generation *int64, lanes []redisbroker.SeekLane) (redisbroker.SeekOutcome, error)
	RequestSeek(ctx context.Context, group, key string, req redisbroker.SeekRequest) (status, detail string, err error)
	SeekRequestStatus(ctx context.Context, group, key, id string) (redisbroker.SeekRequestState, bool, error)
	CancelSeekRequest(ctx context.Context, group, key, id string) (string, error)
	ForgetSeekRequest(ctx context.Context, group, key, id string) error
	MarkSeekWake(ctx context.Context, group, key string, at time.Time) error
}

// SeekKind is how a seek's target is given.
type SeekKind string

// Seek targets.
const (
	SeekToID       SeekKind = "id"       // a stream id
	SeekToTime     SeekKind = "time"     // a time: entries from it on are handled again
	SeekToEarliest SeekKind = "earliest" // before the first entry
	SeekToLatest   SeekKind = "latest"   // the newest entry the plan sees
	SeekShift      SeekKind = "shift"    // N entries forward (N > 0) or back (N < 0)
)

// SeekTarget is where a seek moves a group. Parse the CLI's --to with
// ParseSeekTo.
type SeekTarget struct {
	Kind  SeekKind
	ID    string    // SeekToID
	Time  time.Time // SeekToTime
	Shift int64     // SeekShift
}

// String is the target as the CLI takes it: "1700000000000-0",
// "2026-12-02T14:05:00Z", "earliest", "latest", "shift -10".
func (t SeekTarget) String() string {
	switch t.Kind {
	case SeekToID:
		return t.ID
	case SeekToTime:
		return t.Time.UTC().Format(time.RFC3339Nano)
	case SeekShift:
		return "shift " + strconv.FormatInt(t.Shift, 10)
	}
	return string(t.Kind)
}

// ErrBadSeekTarget is returned (wrapped, naming the value) by
// ParseSeekTo for a --to that is none of the forms or a time in the
// future, and by PlanSeek for a stream id after the server's clock.
var ErrBadSeekTarget = errors.New("repair: bad seek target")

// ParseSeekTo parses --to: a stream id (ms or ms-seq), an RFC 3339 time,
// a duration ago ("15m-ago", "2h30m-ago"), "earliest" or "latest". now
// is the reference for durations and the bound a time may not pass.
func ParseSeekTo(s string, now time.Time) (SeekTarget, error) {
	switch s {
	case "earliest":
		return SeekTarget{Kind: SeekToEarliest}, nil
	case "latest":
		return SeekTarget{Kind: SeekToLatest}, nil
	}
	if d, ok := strings.CutSuffix(s, "-ago"); ok {
		dur, err := time.ParseDuration(d)
		if err != nil || dur <= 0 {
			return SeekTarget{}, fmt.Errorf("%w: %q: a duration ago is a positive Go duration and -ago, e.g. 15m-ago", ErrBadSeekTarget, s)
		}
		return SeekTarget{Kind: SeekToTime, Time: now.Add(-dur)}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		if t.After(now) {
			return SeekTarget{}, fmt.Errorf("%w: %q is in the future (now is %s)", ErrBadSeekTarget, s, now.UTC().Format(time.RFC3339))
		}
		return SeekTarget{Kind: SeekToTime, Time: t}, nil
	}
	if id, err := broker.ParseStreamID(s); err == nil {
		return SeekTarget{Kind: SeekToID, ID: id.String()}, nil
	}
	return SeekTarget{}, fmt.Errorf("%w: %q: want a stream id (1700000000000-0), an RFC 3339 time (2026-12-02T14:05:00Z), a duration ago (15m-ago), earliest or latest", ErrBadSeekTarget, s)
}

// Seek owners: who held the partition's lease when the plan saw it
// (SeekState.Owner).
const (
	SeekOwnerNone    = "none"
	SeekOwnerProtctl = "protctl"
	SeekOwnerForeign = "foreign"
)

// Lane selections of a seek.
const (
	LaneMain     = "main"
	LaneBackfill = "backfill"
	LaneAll      = "all"
)

// SeekRequest asks to move a group on a category's partitions.
type SeekRequest struct {
	Category string
	// Keys are the partitions; with neither Keys nor Match, every key of
	// the category's index.
	Keys []string
	// Match is a glob (path.Match) over the index's keys.
	Match  string
	Group  string
	Target SeekTarget
	// Lane is LaneMain, LaneBackfill or LaneAll (default).
	Lane string
	// Force allows seeking a partition a foreign worker (not a protctl
	// node) holds: apply deletes its lease in the seek's own step, only
	// while it still holds the value the plan saw.
	Force bool
	By    string
}

// SeekState is a seek item's state: who held the lease, the lanes as the
// plan saw them, and (after apply) when and by which generation the seek
// was done.
type SeekState struct {
	// Owner is SeekOwnerNone, SeekOwnerProtctl (a live protctl node: it
	// carries the seek out itself) or SeekOwnerForeign.
	Owner string `json:"owner"`
	// OwnerID is the lease's owner part; "" when free.
	OwnerID string          `json:"ownerId,omitempty"`
	Lanes   []SeekLaneState `json:"lanes"`
	// DoneAt is when the seek was done (the owner's, or Redis' clock), in
	// the CLI's timestamp format; null until applied.
	DoneAt *string `json:"doneAt"`
	// DoneGeneration is the generation the seek was done under: the
	// owner's, or the one the plan saw for a free partition.
	DoneGeneration *int64 `json:"doneGeneration"`
}

// SeekLaneState is one lane of a seek.
type SeekLaneState struct {
	Lane   string `json:"lane"` // main or backfill
	Stream string `json:"stream"`
	// From is the group's position (last-delivered-id); null when the
	// group is not created on the lane, which is then left alone.
	From *string `json:"from"`
	To   string  `json:"to"`
	// Rehandle counts the entries delivered before that will be handled
	// again (a rewind); Skip those not delivered yet that will not be
	// (a forward seek).
	Rehandle int64 `json:"rehandle"`
	Skip     int64 `json:"skip"`
	// Pending counts the group's pending entries; PendingAcked those the
	// seek acks (after the target, to be delivered again once, in order,
	// or before a forward target: skipped), PendingKept those it leaves
	// pending (at or before a rewind's target: handled first).
	Pending      int64 `json:"pending"`
	PendingAcked int64 `json:"pendingAcked"`
	PendingKept  int64 `json:"pendingKept"`
}

// WithSeekWait bounds how long Apply waits for a protctl owner to carry out
// a seek request (WithSeekWait). Default 30s.
func WithSeekWait(d time.Duration) Option { return func(c *config) { c.seekWait = d } }

// PlanSeek plans a seek per partition (see SeekRequest, SeekState).
func (r *Repairer) PlanSeek(ctx context.Context, req SeekRequest) (*Plan, error) {
	const op = "plan seek"
	l := r.broker.Layout()
	if err := l.ValidateName(op, "category", req.Category); err != nil {
		return nil, err
	}
	if err := l.ValidateName(op, "group", req.Group); err != nil {
		return nil, err
	}
	switch req.Lane {
	case "":
		req.Lane = LaneAll
	case LaneMain, LaneBackfill, LaneAll:
	default:
		return nil, &broker.InvalidArgumentError{Op: op, Arg: "lane", Value: strconv.Quote(req.Lane), Reason: "want main, backfill or all"}
	}
	if req.Match != "" {
		if _, err := path.Match(req.Match, ""); err != nil {
			return nil, &broker.InvalidArgumentError{Op: op, Arg: "match", Value: strconv.Quote(req.Match), Reason: "not a glob pattern"}
		}
	}
	if req.Target.Kind == SeekToID {
		// An id after the server's clock is in the future, as a time
		// after it is (ParseSeekTo): no entry has it yet, and moving a
		// group there would skip entries not even written. The server's
		// clock is the one that stamps the ids.
		id, err := broker.ParseStreamID(req.Target.ID)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: want a stream id (1700000000000-0)", ErrBadSeekTarget, req.Target.ID)
		}
		now, err := r.inspect.ServerTime(ctx)
		if err != nil {
			return nil, err
		}
		if ms := now.UnixMilli(); ms >= 0 && id.Ms > uint64(ms) {
			return nil, fmt.Errorf("%w: %q is in the future (the Redis server's time is %s)", ErrBadSeekTarget, req.Target.ID, output.Timestamp(now))
		}
	}
	keys, err := r.seekKeys(ctx, req)
	if err != nil {
		return nil, err
	}
	plan := r.newPlan()
	if plan.ID, err = newPlanID(); err != nil {
		return nil, err
	}
	items, known, err := r.planSeekItems(ctx, req, keys)
	if err != nil {
		return nil, err
	}
	// Each group's lease state in the words of partitions ls: a lease
	// not held is released or expired by whether work waits, which only
	// the listing reads (one pipelined pass over the keys that need it).
	var unheld []string
	for i := range items {
		pc := &items[i].Precondition
		switch {
		case pc.Lease != nil:
			pc.LeaseState = inspect.LeaseHeld
		case pc.Generation == nil:
			pc.LeaseState = inspect.LeaseFree
		default:
			unheld = append(unheld, items[i].Target.Key)
		}
	}
	if len(unheld) > 0 {
		gs, err := r.groupOn(ctx, req.Category, req.Group, unheld)
		if err != nil {
			return nil, err
		}
		for i := range items {
			if g, ok := gs[items[i].Target.Key]; ok && items[i].Precondition.LeaseState == "" {
				items[i].Precondition.LeaseState = g.LeaseState
			}
		}
	}
	plan.Items = items
	if !known {
		reg, err := r.client.SIsMember(ctx, l.GroupsKey(req.Category), req.Group).Result()
		if err != nil {
			return nil, err
		}
		if !reg {
			return nil, fmt.Errorf("%w: group %q reads none of the %d partitions selected of %q (not on their lanes, never leased, not registered)", inspect.ErrNotFound, req.Group, len(keys), req.Category)
		}
	}
	return plan, nil
}

// planSeekParallel is how many partitions a seek plan reads at once. Each
// partition's plan is about eight round trips (its lease, its owner, each
// lane's group, pending entries and bounds), and one after the other they
// took 13.6 s for 10,000 partitions (BenchmarkSeek10k), the time of the
// round trips, not the server's work.
const planSeekParallel = 16

// planSeekItems plans keys' items, planSeekParallel partitions at a time,
// in keys' order; known says whether the group reads any of them.
func (r *Repairer) planSeekItems(ctx context.Context, req SeekRequest, keys []string) (items []Item, known bool, err error) {
	items = make([]Item, len(keys))
	seen := make([]bool, len(keys))
	owners := &ownerCache{known: map[string]*ownerLookup{}}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(planSeekParallel, len(keys)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				it, ok, err := r.planSeekItem(ctx, req, keys[i], owners)
				if err != nil {
					cancel(err)
					continue
				}
				items[i], seen[i] = it, ok
			}
		}()
	}
feed:
	for i := range keys {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, false, err
	}
	return items, slices.Contains(seen, true), nil
}

// ownerCache remembers whether each lease owner is a protctl node, for
// the planners of one plan. An owner is looked up once, whoever asks
// first, and the others wait for that answer: for an owner that is no
// protctl node the lookup scans the keyspace (inspect.NodeKnown), and
// sixteen planners missing the cache together scanned it sixteen times.
type ownerCache struct {
	mu    sync.Mutex
	known map[string]*ownerLookup
}

type ownerLookup struct {
	done    chan struct{} // closed once protctl and err are set
	protctl bool
	err     error
}

// protctl says whether owner is a known protctl node. A failed lookup is
// not remembered: the next planner to ask tries again.
func (c *ownerCache) protctl(ctx context.Context, r *Repairer, owner string) (bool, error) {
	c.mu.Lock()
	l, ok := c.known[owner]
	if !ok {
		l = &ownerLookup{done: make(chan struct{})}
		c.known[owner] = l
	}
	c.mu.Unlock()
	if ok {
		select {
		case <-l.done:
		case <-ctx.Done():
			return false, ctx.Err()
		}
		if l.err == nil {
			return l.protctl, nil
		}
		return c.protctl(ctx, r, owner)
	}
	l.protctl, l.err = r.inspect.NodeKnown(ctx, owner)
	if l.err != nil {
		c.mu.Lock()
		delete(c.known, owner)
		c.mu.Unlock()
	}
	close(l.done)
	return l.protctl, l.err
}

// seekKeys lists the partitions a seek names: the keys given (each must
// exist), or the index's keys matching Match (all without it), sorted.
func (r *Repairer) seekKeys(ctx context.Context, req SeekRequest) ([]string, error) {
	l := r.broker.Layout()
	if len(req.Keys) > 0 {
		for _, k := range req.Keys {
			if err := l.ValidateKey(k, r.cfg.backfill); err != nil {
				return nil, err
			}
			in, err := r.client.SIsMember(ctx, l.IndexKey(req.Category), k).Result()
			if err != nil {
				return nil, wrongType(ctx, r.client, "plan seek", l.IndexKey(req.Category), "set", err)
			}
			n, err := r.client.Exists(ctx, l.Stream(req.Category, k)).Result()
			if err != nil {
				return nil, err
			}
			if !in && n == 0 {
				return nil, fmt.Errorf("%w: partition %q of %q (not in the index, no stream)", inspect.ErrNotFound, k, req.Category)
			}
		}
		return req.Keys, nil
	}
	all, err := r.client.SMembers(ctx, l.IndexKey(req.Category)).Result()
	if err != nil {
		return nil, wrongType(ctx, r.client, "plan seek", l.IndexKey(req.Category), "set", err)
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("%w: category %q has no partitions (its index %s is empty)", inspect.ErrNotFound, req.Category, l.IndexKey(req.Category))
	}
	var keys []string
	for _, k := range all {
		if ok, _ := path.Match(req.Match, k); req.Match == "" || ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

// wrongType turns a WRONGTYPE reply about key into a *broker.WrongTypeError.
func wrongType(ctx context.Context, c redis.UniversalClient, op, key, want string, err error) error {
	if err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
		return err
	}
	got, terr := c.Type(ctx, key).Result()
	if terr != nil {
		got = "another type"
	}
	return &broker.WrongTypeError{Op: op, Key: key, Want: want, Got: got}
}

// planSeekItem plans the seek of one partition. seen says the group is
// known on it (a lane's group, a lease or a generation).
func (r *Repairer) planSeekItem(ctx context.Context, req SeekRequest, key string, owners *ownerCache) (Item, bool, error) {
	const op = "plan seek"
	l := r.broker.Layout()
	it := Item{
		Action: ActionSeek,
		Target: Target{Category: req.Category, Key: key, Group: req.Group},
		Params: Params{Force: req.Force, By: req.By, SeekTo: req.Target.String(), Lane: req.Lane},
	}
	lease, err := r.inspect.Lease(ctx, req.Group, key)
	if err != nil {
		return it, false, err
	}
	it.Precondition.Lease, it.Precondition.Generation = lease.Token, lease.Counter
	st := &SeekState{Owner: SeekOwnerNone, Lanes: []SeekLaneState{}}
	it.Precondition.Seek = st
	seen := lease.Counter != nil || lease.Token != nil
	if lease.Token != nil && lease.State == inspect.LeaseHeld {
		owner := ""
		if lease.Owner != nil {
			owner = *lease.Owner
		}
		st.OwnerID = owner
		protctl, err := owners.protctl(ctx, r, owner)
		if err != nil {
			return it, false, err
		}
		st.Owner = SeekOwnerForeign
		if protctl {
			st.Owner = SeekOwnerProtctl
		}
	}
	type laneSel struct{ name, stream string }
	var lanes []laneSel
	if req.Lane != LaneBackfill {
		lanes = append(lanes, laneSel{LaneMain, l.Stream(req.Category, key)})
	}
	if req.Lane != LaneMain {
		lanes = append(lanes, laneSel{LaneBackfill, l.LaneStream(req.Category, key, r.cfg.backfill)})
	}
	var refusals []string
	moves := 0
	for _, ln := range lanes {
		ls, refusal, err := r.planSeekLane(ctx, op, req, ln.name, ln.stream)
		if err != nil {
			return it, false, err
		}
		if ls.From != nil {
			seen = true
			if *ls.From != ls.To {
				moves++
			}
		}
		if refusal != "" {
			refusals = append(refusals, refusal)
		}
		st.Lanes = append(st.Lanes, ls)
	}
	parked, err := r.seekParked(ctx, req.Group, key)
	if err != nil {
		return it, false, err
	}
	var rehandle, skip, acked int64
	for _, ls := range st.Lanes {
		rehandle, skip, acked = rehandle+ls.Rehandle, skip+ls.Skip, acked+ls.PendingAcked
	}
	counts := fmt.Sprintf("%d entries handled again, %d skipped, %d pending acked", rehandle, skip, acked)
	switch {
	case len(refusals) > 0:
		it.Reason = strings.Join(refusals, "; ")
	case moves == 0 && acked == 0:
		it.Result = ResultSkipped
		it.Reason = "the group is already at the target on every lane it reads (or reads none): nothing to do"
	case parked != "" && !req.Force:
		it.Reason = parked + ": retry or skip it first (protctl parked retry|skip), or --force to seek anyway and leave the ledger entry as it is"
	case st.Owner == SeekOwnerForeign && !req.Force:
		it.Reason = "the lease " + heldText(*lease.Token, lease.TTLMs) + ", not a protctl node (a Protean worker?): seeking takes the partition from it; use --force"
	case st.Owner == SeekOwnerForeign:
		it.Allowed = true
		it.Reason = fmt.Sprintf("take the partition from the foreign lease %s and seek, in one step while the lease still holds that value: %s", *lease.Token, counts)
	case st.Owner == SeekOwnerProtctl:
		it.Allowed = true
		it.Reason = fmt.Sprintf("the protctl node %s (generation %d) carries the seek out between two batches under its lease: %s (counted now; the node moves on meanwhile)", st.OwnerID, derefInt(lease.Generation), counts)
	default:
		it.Allowed = true
		it.Reason = fmt.Sprintf("no lease is held: seek in one step while none is taken and the generation stays %s: %s", genText(lease.Counter), counts)
	}
	return it, seen, nil
}

// seekParked says, when the failure ledger has an entry for group on
// key, what it is ("" when none, or no ledger is configured). A parked
// partition's head is pending in the group; a seek would ack it (forward)
// or move the position around it (rewind) while the ledger still names
// it, so the owner and a later parked retry|skip would disagree with
// the stream: decision 0043 refuses it without --force.
func (r *Repairer) seekParked(ctx context.Context, group, key string) (string, error) {
	if r.cfg.ledger == nil {
		return "", nil
	}
	p, err := r.cfg.ledger.GetParked(ctx, group, key, key)
	switch {
	case errors.Is(err, ledger.ErrNotParked):
		return "", nil
	case err != nil:
		return "", err
	}
	return fmt.Sprintf("the partition is %s in the failure ledger at %s (%d attempts: %s)", p.Status, p.Position, p.Attempts, p.Error), nil
}

func derefInt(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func genText(g *int64) string {
	if g == nil {
		return "none (never leased)"
	}
	return strconv.FormatInt(*g, 10)
}

const maxIDSeq = uint64(math.MaxUint64)

// planSeekLane resolves the target on one lane and counts what moving
// there does. refusal is set when the lane cannot be sought as asked.
func (r *Repairer) planSeekLane(ctx context.Context, op string, req SeekRequest, name, stream string) (SeekLaneState, string, error) {
	ls := SeekLaneState{Lane: name, Stream: stream}
	c := r.client
	typ, err := c.Type(ctx, stream).Result()
	if err != nil {
		return ls, "", err
	}
	switch typ {
	case "none":
		return ls, "", nil
	case "stream":
	default:
		return ls, "", &broker.WrongTypeError{Op: op, Key: stream, Want: "stream", Got: typ}
	}
	groups, err := c.XInfoGroups(ctx, stream).Result()
	if err != nil {
		return ls, "", err
	}
	var from string
	found := false
	for _, g := range groups {
		if g.Name == req.Group {
			from, found = g.LastDeliveredID, true
		}
	}
	if !found {
		return ls, "", nil
	}
	ls.From = &from
	info, err := c.XInfoStream(ctx, stream).Result()
	if err != nil {
		return ls, "", err
	}
	switch t := req.Target; t.Kind {
	case SeekToID:
		ls.To = t.ID
	case SeekToEarliest:
		ls.To = "0-0"
	case SeekToLatest:
		ls.To = info.LastGeneratedID
	case SeekToTime:
		ms := t.Time.UnixMilli()
		if ms <= 0 {
			ls.To = "0-0"
		} else {
			ls.To = broker.StreamID{Ms: uint64(ms - 1), Seq: maxIDSeq}.String()
		}
		if first := info.FirstEntry.ID; first != "" && info.EntriesAdded > info.Length && less(ls.To, first) && less(ls.To, from) {
			return ls, fmt.Sprintf("%s on %s: %d of its %d entries were trimmed or deleted and the first left is %s, after the time: the replay would not start at %s; use --to earliest to replay what is left",
				req.Target, stream, info.EntriesAdded-info.Length, info.EntriesAdded, first, req.Target), nil
		}
	case SeekShift:
		if ls.To, err = shiftTarget(ctx, c, stream, from, t.Shift); err != nil {
			return ls, "", err
		}
	}
	if less(info.LastGeneratedID, ls.To) && req.Target.Kind == SeekToID && name == LaneMain {
		return ls, fmt.Sprintf("--to %s is after the newest id of %s (%s)", ls.To, stream, info.LastGeneratedID), nil
	}
	if less(info.LastGeneratedID, ls.To) {
		// A time (or, on the backfill lane, an id) after the newest
		// entry: the group moves to the newest.
		ls.To = info.LastGeneratedID
	}
	switch {
	case less(ls.To, from):
		if ls.Rehandle, err = countRange(ctx, c, stream, ls.To, from); err != nil {
			return ls, "", err
		}
	case less(from, ls.To):
		if ls.Skip, err = countRange(ctx, c, stream, from, ls.To); err != nil {
			return ls, "", err
		}
	}
	start := "-"
	for {
		p, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: req.Group, Start: start, End: "+", Count: 1000}).Result()
		if err != nil {
			return ls, "", err
		}
		for _, e := range p {
			ls.Pending++
			if less(from, ls.To) || less(ls.To, e.ID) {
				ls.PendingAcked++
			} else {
				ls.PendingKept++
			}
		}
		if len(p) < 1000 {
			break
		}
		start = "(" + p[len(p)-1].ID
	}
	return ls, "", nil
}

// less reports a < b for stream ids.
func less(a, b string) bool {
	ia, err1 := broker.ParseStreamID(a)
	ib, err2 := broker.ParseStreamID(b)
	return err1 == nil && err2 == nil && ia.Less(ib)
}

// countRange counts the entries of stream in (after, upTo].
func countRange(ctx context.Context, c redis.UniversalClient, stream, after, upTo string) (int64, error) {
	var n int64
	start := "(" + after
	for {
		page, err := c.XRangeN(ctx, stream, start, upTo, 1000).Result()
		if err != nil {
			return 0, err
		}
		n += int64(len(page))
		if len(page) < 1000 {
			return n, nil
		}
		start = "(" + page[len(page)-1].ID
	}
}

// shiftTarget is the position n entries after (n > 0) or before (n < 0)
// from: back n, the last n entries up to from are handled again.
func shiftTarget(ctx context.Context, c redis.UniversalClient, stream, from string, n int64) (string, error) {
	switch {
	case n < 0:
		page, err := c.XRevRangeN(ctx, stream, from, "-", -n+1).Result()
		if err != nil {
			return "", err
		}
		if int64(len(page)) == -n+1 {
			return page[len(page)-1].ID, nil
		}
		return "0-0", nil
	case n > 0:
		page, err := c.XRangeN(ctx, stream, "("+from, "+", n).Result()
		if err != nil {
			return "", err
		}
		if len(page) > 0 {
			return page[len(page)-1].ID, nil
		}
	}
	return from, nil
}

// applySeek carries out a seek item as the plan's owner says: in one step
// on a free partition, after a fenced release of a foreign lease
// (--force), or through a request the protctl owner carries out.
func (r *Repairer) applySeek(ctx context.Context, planID string, it *Item, wait time.Duration) error {
	s, ok := r.broker.(Seeker)
	if !ok {
		return fmt.Errorf("repair: the broker cannot seek")
	}
	st := it.Precondition.Seek
	t := it.Target
	var lanes []redisbroker.SeekLane
	for _, ls := range st.Lanes {
		if ls.From != nil {
			lanes = append(lanes, redisbroker.SeekLane{Stream: ls.Stream, From: *ls.From, To: ls.To})
		}
	}
	why, err := r.seekRefusals(ctx, []*Item{it})
	if err != nil {
		return err
	}
	if why[0] != "" {
		it.Result, it.Detail = ResultRefused, why[0]
		return nil
	}
	if !it.Params.Force {
		// Parked since the plan (which refuses a parked partition): the
		// ledger is in other keys than the seek's, so this is checked
		// here, not in the seek's step.
		parked, err := r.seekParked(ctx, t.Group, t.Key)
		if err != nil {
			return err
		}
		if parked != "" {
			it.Result, it.Detail = ResultConflict, parked+" since the plan: nothing changed"
			return nil
		}
	}
	var o redisbroker.SeekOutcome
	switch st.Owner {
	case SeekOwnerProtctl:
		return r.applySeekRequest(ctx, s, planID, it, lanes, wait)
	case SeekOwnerForeign:
		// The foreign owner reads on until it loses the lease: its
		// positions are not the plan's (From still gives the direction).
		for i := range lanes {
			lanes[i].AnyFrom = true
		}
		var done bool
		if o, done, err = r.seekForeign(ctx, it, lanes); err != nil || done {
			return err
		}
	default:
		o, err = s.SeekFree(ctx, t.Group, t.Key, it.Precondition.Generation, lanes)
	}
	if err != nil {
		return err
	}
	switch o.Status {
	case redisbroker.SeekApplied:
	case redisbroker.SeekLeased:
		it.Result, it.Detail = ResultConflict, "a lease appeared since the plan: "+o.Detail
		return nil
	default:
		it.Result, it.Detail = ResultConflict, "the group's position moved since the plan: "+o.Detail
		return nil
	}
	at := r.seekDone(ctx, it, o.Lanes, time.Time{}, derefInt(it.Precondition.Generation))
	// Wake the node watching the partition: from its old position it
	// would not see the entries a rewind hands back until the next
	// append. The Pub/Sub message is the fast way; the wake member of
	// the seeks set, which every node re-reads each renewal period, the
	// durable one (a lost message delays the replay by one period).
	_ = r.client.Publish(ctx, r.broker.Layout().WakeChannel(t.Category), t.Key).Err()
	if err := s.MarkSeekWake(context.WithoutCancel(ctx), t.Group, t.Key, at); err != nil {
		it.Detail += fmt.Sprintf(" (the wake-up of the group's nodes was not recorded: %v; an idle node reads the partition at its next append or restart)", err)
	}
	return nil
}

// seekReleaser is the optional capability of a Seeker to take a
// partition from a lease's holder and seek it in one step
// (redisbroker.Broker's SeekFreeReleasing).
type seekReleaser interface {
	SeekFreeReleasing(ctx context.Context, c redisbroker.SeekFreeCall) (redisbroker.SeekOutcome, error)
}

var _ seekReleaser = (*redisbroker.Broker)(nil)

// seekForeign seeks a partition a foreign worker held at the plan (with
// --force): the lease is deleted only in the step that seeks, while it
// still holds the plan's token and every check passes, so a conflict
// leaves the owner its lease. A broker without that step releases the
// lease fenced first, then seeks: done reports a conflict recorded in it
// already (the release failed).
func (r *Repairer) seekForeign(ctx context.Context, it *Item, lanes []redisbroker.SeekLane) (o redisbroker.SeekOutcome, done bool, err error) {
	t, token := it.Target, *it.Precondition.Lease
	if sr, ok := r.broker.(seekReleaser); ok {
		o, err = sr.SeekFreeReleasing(ctx, redisbroker.SeekFreeCall{Group: t.Group, Key: t.Key, Generation: it.Precondition.Generation, Lanes: lanes, Release: token})
		return o, false, err
	}
	f := broker.Fence{LeaseKey: r.broker.Layout().LeaseKey(t.Group, t.Key), Token: token}
	released, err := r.broker.ReleasePartitionLease(ctx, f)
	if err != nil {
		return o, false, err
	}
	if !released {
		it.Result, it.Detail = ResultConflict, r.leaseMoved(ctx, t.Category, t.Group, t.Key, f.Token)
		return o, true, nil
	}
	o, err = r.broker.(Seeker).SeekFree(ctx, t.Group, t.Key, it.Precondition.Generation, lanes)
	return o, false, err
}

// seekDone records an applied seek in it, and returns when it was done.
func (r *Repairer) seekDone(ctx context.Context, it *Item, lanes []redisbroker.SeekLaneResult, at time.Time, gen int64) time.Time {
	if at.IsZero() {
		if now, err := r.client.Time(ctx).Result(); err == nil {
			at = now
		} else {
			at = r.cfg.now()
		}
	}
	ts := output.Timestamp(at)
	it.Precondition.Seek.DoneAt, it.Precondition.Seek.DoneGeneration = &ts, &gen
	var parts []string
	for _, l := range lanes {
		parts = append(parts, fmt.Sprintf("%s %s -> %s (%d pending acked, %d kept)", l.Stream, l.From, l.To, l.Acked, l.Kept))
	}
	if len(parts) == 0 {
		parts = append(parts, "no lane to move")
	}
	it.Result = ResultApplied
	it.Detail = fmt.Sprintf("sought at %s under generation %d: %s", ts, gen, strings.Join(parts, "; "))
	return at
}

// applySeekRequest records the seek for the protctl owner the plan saw
// and waits, up to the seek wait, for it to be carried out.
func (r *Repairer) applySeekRequest(ctx context.Context, s Seeker, planID string, it *Item, lanes []redisbroker.SeekLane, wait time.Duration) (err error) {
	t := it.Target
	if it.Precondition.Lease == nil {
		return fmt.Errorf("%w: seek item of a protctl owner without a planned lease", ErrInvalidPlan)
	}
	id := planID
	if id == "" {
		var err error
		if id, err = newPlanID(); err != nil {
			return err
		}
	}
	if prev, ok, err := s.SeekRequestStatus(ctx, t.Group, t.Key, id); err != nil {
		return err
	} else if ok && prev.Status != "" {
		r.seekClosed(ctx, s, it, id, prev)
		if it.Result == ResultApplied {
			it.Result = ResultDone
		}
		return nil
	}
	if wait <= 0 {
		wait = r.cfg.seekWait
	}
	// The lanes carry the positions the plan saw: they give the seek its
	// direction, whatever the owner read meanwhile (seek.lua).
	status, detail, err := s.RequestSeek(ctx, t.Group, t.Key, redisbroker.SeekRequest{ID: id, Token: *it.Precondition.Lease, By: it.Params.By, Lanes: lanes})
	if err != nil {
		// The request may have been recorded before the call failed (the
		// operator's Ctrl-C, a lost reply): withdraw it, as an
		// interrupted wait does, rather than leave it for the owner.
		if werr := r.withdrawSeek(ctx, s, it, id, wait); werr != nil {
			return withdrawFailed(err, werr)
		}
		if it.Result == ResultApplied {
			return nil
		}
		return err
	}
	switch status {
	case "requested", "exists":
	case redisbroker.SeekLeased:
		it.Result, it.Detail = ResultConflict, fmt.Sprintf("the lease is now %q, the plan saw %s: nothing requested", detail, *it.Precondition.Lease)
		return nil
	default:
		it.Result, it.Detail = ResultConflict, fmt.Sprintf("another seek request (%s) waits for the owner: nothing requested", detail)
		return nil
	}
	// Whatever ends the wait (the deadline, an error, the operator's
	// Ctrl-C cancelling ctx), a request still open is withdrawn: nobody
	// would report it if the owner carried it out later.
	closed := false
	defer func() {
		if !closed {
			werr := r.withdrawSeek(ctx, s, it, id, wait)
			switch {
			case werr != nil && err != nil:
				// Apply reports the error, not the item's detail: it
				// must say that the request may still be carried out.
				err = withdrawFailed(err, werr)
			case it.Result == ResultApplied:
				err = nil // carried out before the withdrawal: say so
			}
		}
	}()
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		st, ok, err := s.SeekRequestStatus(ctx, t.Group, t.Key, id)
		if err != nil {
			return err
		}
		if ok && st.Status != "" {
			closed = true
			r.seekClosed(ctx, s, it, id, st)
			return nil
		}
		if time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// withdrawSeek withdraws request id unless the owner carried it out
// first (atomically: seekcancel.lua), and records which in it. It runs
// without ctx's cancellation: it is what an interrupted wait leaves
// behind. It returns the withdrawal's error: the request may then still
// be carried out, and it says so in it.
func (r *Repairer) withdrawSeek(ctx context.Context, s Seeker, it *Item, id string, wait time.Duration) error {
	t := it.Target
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	why := fmt.Sprintf("the owner %s did not carry the seek out within %s (it stopped, or lost the partition)", it.Precondition.Seek.OwnerID, wait)
	if ctx.Err() != nil {
		why = "the wait for the owner " + it.Precondition.Seek.OwnerID + " was interrupted"
	}
	got, err := s.CancelSeekRequest(bg, t.Group, t.Key, id)
	if err != nil {
		it.Result, it.Detail = ResultConflict, fmt.Sprintf("%s, and withdrawing the request failed (%v): the owner may still carry it out; see protctl partitions ls", why, err)
		return err
	}
	if got != "cancelled" {
		if st, ok, err := s.SeekRequestStatus(bg, t.Group, t.Key, id); err == nil && ok && st.Status != "" {
			r.seekClosed(bg, s, it, id, st)
			return nil
		}
	}
	it.Result, it.Detail = ResultConflict, why+": the request was withdrawn, nothing changed"
	return nil
}

// withdrawFailed is err, which ended a seek request's call or wait, once
// withdrawing the request failed too (werr): the owner may still carry
// it out, and the operator must hear it.
func withdrawFailed(err, werr error) error {
	return fmt.Errorf("%w; withdrawing the seek request failed too (%v): the owner may still carry it out, see protctl partitions ls", err, werr)
}

// seekClosed records what the owner did with the request and forgets it.
func (r *Repairer) seekClosed(ctx context.Context, s Seeker, it *Item, id string, st redisbroker.SeekRequestState) {
	_ = s.ForgetSeekRequest(context.WithoutCancel(ctx), it.Target.Group, it.Target.Key, id)
	if st.Status != redisbroker.SeekApplied {
		it.Result, it.Detail = ResultConflict, "the owner refused the request: "+st.Detail
		return
	}
	r.seekDone(ctx, it, st.Lanes, st.DoneAt, st.Generation)
}

// seekBatch bounds how many free seeks one pipeline carries.
const seekBatch = 500

// seekBatcher is the optional capability of a Seeker to run many free
// seeks in one pipeline (redisbroker.Broker).
type seekBatcher interface {
	SeekFreeBatch(ctx context.Context, calls []redisbroker.SeekFreeCall) ([]redisbroker.SeekOutcome, []error)
}

// seekBatchable says it is a seek of a partition nobody held at the plan
// (one step, no request to wait for, no lease to release), which Apply
// runs in a batch when the broker can and nothing paces the apply.
func (r *Repairer) seekBatchable(it *Item) bool {
	if it.Action != ActionSeek || !it.Allowed || it.Precondition.Seek == nil || it.Precondition.Seek.Owner != SeekOwnerNone {
		return false
	}
	_, ok := r.broker.(seekBatcher)
	return ok
}

// applySeekBatch carries out the free seeks p.Items[idx...] as applySeek
// does one, with the round trips shared: the ledger check per item (as
// applySeek), the seeks in one pipeline, one TIME for when they were done,
// and one pipeline of wake-ups (a PUBLISH per key, one SADD of every wake
// member). It records each item's result and returns each one's error
// (the items after a failed one are still recorded: they ran).
func (r *Repairer) applySeekBatch(ctx context.Context, p *Plan, idx []int) []error {
	errs := make([]error, len(idx))
	s := r.broker.(seekBatcher)
	var (
		calls []redisbroker.SeekFreeCall
		sent  []int // positions in idx of calls
	)
	batch := make([]*Item, len(idx))
	for k, i := range idx {
		batch[k] = &p.Items[i]
	}
	why, err := r.seekRefusals(ctx, batch)
	if err != nil {
		for k := range errs {
			errs[k] = err
		}
		return errs
	}
	for k, i := range idx {
		it := &p.Items[i]
		it.Result, it.Detail = ResultNone, ""
		if why[k] != "" {
			it.Result, it.Detail = ResultRefused, why[k]
			continue
		}
		if !it.Params.Force {
			parked, err := r.seekParked(ctx, it.Target.Group, it.Target.Key)
			if err != nil {
				errs[k] = err
				continue
			}
			if parked != "" {
				it.Result, it.Detail = ResultConflict, parked+" since the plan: nothing changed"
				continue
			}
		}
		var lanes []redisbroker.SeekLane
		for _, ls := range it.Precondition.Seek.Lanes {
			if ls.From != nil {
				lanes = append(lanes, redisbroker.SeekLane{Stream: ls.Stream, From: *ls.From, To: ls.To})
			}
		}
		calls = append(calls, redisbroker.SeekFreeCall{Group: it.Target.Group, Key: it.Target.Key, Generation: it.Precondition.Generation, Lanes: lanes})
		sent = append(sent, k)
	}
	if len(calls) == 0 {
		return errs
	}
	outs, cerrs := s.SeekFreeBatch(ctx, calls)
	var done []int // positions in idx applied
	applied := make([]bool, len(idx))
	for j, k := range sent {
		it := &p.Items[idx[k]]
		o, err := outs[j], cerrs[j]
		switch {
		case err != nil:
			errs[k] = err
		case o.Status == redisbroker.SeekApplied:
			done, applied[k] = append(done, k), true
		case o.Status == redisbroker.SeekLeased:
			it.Result, it.Detail = ResultConflict, "a lease appeared since the plan: "+o.Detail
		default:
			it.Result, it.Detail = ResultConflict, "the group's position moved since the plan: "+o.Detail
		}
	}
	if len(done) == 0 {
		return errs
	}
	at := time.Time{}
	if now, err := r.client.Time(ctx).Result(); err == nil {
		at = now
	}
	l := r.broker.Layout()
	wakes := map[string][]any{} // group -> wake members
	for j, k := range sent {
		if !applied[k] {
			continue
		}
		it := &p.Items[idx[k]]
		at = r.seekDone(ctx, it, outs[j].Lanes, at, derefInt(it.Precondition.Generation))
		wakes[it.Target.Group] = append(wakes[it.Target.Group], redisbroker.SeekWakeMember(at, it.Target.Key))
	}
	// The wake-ups of applySeek, for the whole batch: the messages are
	// the fast way, the members the durable one.
	wctx := context.WithoutCancel(ctx)
	cmds, _ := r.client.Pipelined(wctx, func(pl redis.Pipeliner) error {
		for _, k := range done {
			t := p.Items[idx[k]].Target
			pl.Publish(wctx, l.WakeChannel(t.Category), t.Key)
		}
		for g, m := range wakes {
			pl.SAdd(wctx, redisbroker.SeekRequestsKey(g), m...)
		}
		return nil
	})
	var werr error
	for _, c := range cmds {
		if c.Name() == "sadd" && c.Err() != nil {
			werr = c.Err()
		}
	}
	if werr != nil {
		for _, k := range done {
			p.Items[idx[k]].Detail += fmt.Sprintf(" (the wake-up of the group's nodes was not recorded: %v; an idle node reads the partition at its next append or restart)", werr)
		}
	}
	return errs
}
