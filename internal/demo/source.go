package demo

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/tui"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// Source is the dashboard's view of the in-memory demo: it reads the
// in-memory broker and stores at each refresh and hands the dashboard the
// same snapshot types internal/inspect reads from Redis. (On Redis the
// dashboard reads Redis itself, through inspect, as `protctl tui` does.)
type Source struct {
	d   *Demo
	b   *memorybroker.Broker
	now func() time.Time
}

var _ tui.Source = (*Source)(nil)

// Source returns the dashboard's source of the in-memory demo; nil on
// Redis.
func (d *Demo) Source() *Source {
	if d.mem == nil {
		return nil
	}
	return &Source{d: d, b: d.mem, now: time.Now}
}

// Categories is the demo's one category.
func (s *Source) Categories(context.Context) ([]string, error) { return []string{Category}, nil }

// Partitions reads every partition of category in one page.
func (s *Source) Partitions(ctx context.Context, category string, page func([]inspect.Partition) error) error {
	if category != Category {
		return nil
	}
	keys, err := s.b.PartitionKeys(ctx, category)
	if err != nil {
		return err
	}
	parked, err := s.parkedKeys(ctx)
	if err != nil {
		return err
	}
	out := make([]inspect.Partition, 0, len(keys))
	for _, k := range keys {
		p, err := s.partition(ctx, category, k, parked)
		if err != nil {
			return err
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil
	}
	return page(out)
}

func (s *Source) parkedKeys(ctx context.Context) (map[string]bool, error) {
	entries, err := s.d.reader.ListParked(ctx, Subscription)
	if err != nil {
		return nil, err
	}
	m := make(map[string]bool, len(entries))
	for _, e := range entries {
		m[e.Aggregate] = true
	}
	return m, nil
}

func idMs(id string) (int64, bool) {
	sid, err := broker.ParseStreamID(id)
	if err != nil {
		return 0, false
	}
	return int64(sid.Ms), true
}

// partition builds the inspect snapshot of one key from the broker.
func (s *Source) partition(ctx context.Context, category, key string, parked map[string]bool) (inspect.Partition, error) {
	l := s.b.Layout()
	p := inspect.Partition{Category: category, Key: key, Stream: l.Stream(category, key)}
	g := inspect.Group{Name: Subscription, Registered: true}
	var lag, newest int64
	for _, lane := range []struct{ name, stream string }{
		{"main", p.Stream}, {broker.DefaultBackfillSuffix, l.LaneStream(category, key, broker.DefaultBackfillSuffix)},
	} {
		info, found, err := s.b.StreamInfo(ctx, lane.stream)
		if err != nil {
			return p, err
		}
		if !found {
			if lane.name == "main" {
				p.Lanes = append(p.Lanes, inspect.Lane{Name: "main", Stream: lane.stream})
			}
			continue
		}
		ln := inspect.Lane{Name: lane.name, Stream: lane.stream, Exists: true, Length: info.Length}
		if info.LastID != "" {
			last := info.LastID
			ln.LastEntryID = &last
			if lane.name == "main" {
				p.LastEntryID = &last
			}
			if ms, ok := idMs(last); ok && ms > newest {
				newest = ms
			}
		}
		p.Length += info.Length
		p.Lanes = append(p.Lanes, ln)
		laneLag := info.Length // a group not created yet reads the lane from 0
		for _, gi := range info.Groups {
			if gi.Name != Subscription {
				continue
			}
			g.Created = true
			g.Pending += gi.Pending
			if lane.name == "main" {
				id := gi.LastDeliveredID
				g.LastDeliveredID = &id
			}
			after, err := s.b.Range(ctx, lane.stream, gi.LastDeliveredID, info.Length+1)
			if err != nil {
				return p, err
			}
			laneLag = int64(len(after))
			if len(after) > 0 && after[0].ID == gi.LastDeliveredID {
				laneLag--
			}
		}
		lag += laneLag
	}
	if newest > 0 {
		idle := max(s.now().UnixMilli()-newest, 0)
		p.IdleMs = &idle
	}
	g.Lag = &lag
	if v, ok, err := s.d.leases(ctx, l.GenerationKey(Subscription, key)); err == nil && ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			g.Generation = &n
		}
	}
	if v, ok, err := s.d.leases(ctx, l.LeaseKey(Subscription, key)); err == nil && ok {
		owner, gen, err := broker.ParseFenceToken(v)
		if err != nil {
			owner = v
		}
		g.Lease = &inspect.LeaseInfo{Owner: owner, Generation: gen, Token: v}
		if ttl, ok, err := s.d.leaseTTL(ctx, l.LeaseKey(Subscription, key)); err == nil && ok {
			ms := ttl.Milliseconds()
			g.Lease.TTLMs = &ms
		}
	}
	isParked := parked[key]
	g.Parked = &isParked
	g.LeaseState = inspect.LeaseStateOf(&g)
	p.Groups = []inspect.Group{g}
	return p, nil
}

// Explain is a partition's summary (the in-memory demo has no pending
// list detail).
func (s *Source) Explain(ctx context.Context, category, key string) (inspect.PartitionDetail, error) {
	parked, err := s.parkedKeys(ctx)
	if err != nil {
		return inspect.PartitionDetail{}, err
	}
	keys, err := s.b.PartitionKeys(ctx, category)
	if err != nil {
		return inspect.PartitionDetail{}, err
	}
	i := sort.SearchStrings(keys, key)
	if i == len(keys) || keys[i] != key {
		return inspect.PartitionDetail{}, fmt.Errorf("%w: partition %s of %s", inspect.ErrNotFound, key, category)
	}
	p, err := s.partition(ctx, category, key, parked)
	if err != nil {
		return inspect.PartitionDetail{}, err
	}
	d := inspect.PartitionDetail{
		Category: p.Category, Key: p.Key, Stream: p.Stream, Length: p.Length,
		LastEntryID: p.LastEntryID, IdleMs: p.IdleMs, Lanes: p.Lanes, Indexed: true, ServerTime: s.now().UTC(),
	}
	for _, g := range p.Groups {
		d.Groups = append(d.Groups, inspect.GroupDetail{Group: g})
	}
	return d, nil
}

// Leases lists the subscription's lease of every partition, in the
// states partitions read (inspect.LeaseStateOf).
func (s *Source) Leases(ctx context.Context) ([]inspect.Lease, error) {
	parked, err := s.parkedKeys(ctx)
	if err != nil {
		return nil, err
	}
	keys, err := s.b.PartitionKeys(ctx, Category)
	if err != nil {
		return nil, err
	}
	l := s.b.Layout()
	out := make([]inspect.Lease, 0, len(keys))
	for _, k := range keys {
		p, err := s.partition(ctx, Category, k, parked)
		if err != nil {
			return nil, err
		}
		g := p.Groups[0]
		category := Category
		le := inspect.Lease{Category: &category, Group: Subscription, Key: k, LeaseKey: l.LeaseKey(Subscription, k),
			State: g.LeaseState, Counter: g.Generation, Generation: g.Generation}
		if g.Lease != nil {
			owner, gen, token := g.Lease.Owner, g.Lease.Generation, g.Lease.Token
			le.Owner, le.Generation, le.Token, le.TTLMs = &owner, &gen, &token, g.Lease.TTLMs
		}
		out = append(out, le)
	}
	return out, nil
}

// Parked lists the ledger's entries.
func (s *Source) Parked(ctx context.Context) ([]ledger.Parked, error) {
	return s.d.reader.ListParked(ctx, "")
}

// Nodes lists the demo's live nodes.
func (s *Source) Nodes(ctx context.Context) ([]runtime.NodeStatus, error) {
	return s.d.members.Members(ctx, Service)
}

// Topics lists the demo topic's partitions with -- Kafka on -- their
// leases, the subscription's checkpoints and the heads.
func (s *Source) Topics(ctx context.Context) ([]tui.TopicPartition, error) {
	k := s.d.kafka
	if k == nil {
		return nil, fmt.Errorf("%w: the demo runs without Kafka (protctl demo --kafka)", tui.ErrUnsupported)
	}
	parts, err := k.src.Partitions(ctx, Topic)
	if err != nil {
		return nil, err
	}
	marks, err := k.src.Watermarks(ctx, Topic, parts...)
	if err != nil {
		return nil, err
	}
	group := redisstore.TopicLeaseGroup(Service, Topic)
	next, err := s.d.checkpoint.LoadAll(ctx, group.String(), TopicSubscription)
	if err != nil {
		return nil, err
	}
	out := make([]tui.TopicPartition, 0, len(parts))
	for _, p := range parts {
		tp := tui.TopicPartition{Service: Service, Topic: Topic, Partition: p}
		head := marks[p].Head
		tp.Head = &head
		if v, ok, err := s.d.leases(ctx, group.LeaseKey(p)); err == nil && ok {
			if owner, gen, err := broker.ParseFenceToken(v); err == nil {
				tp.Owner, tp.Generation = &owner, &gen
			}
		}
		ts := tui.TopicSubscription{Name: TopicSubscription}
		if n, ok := next[p]; ok {
			lag := max(head-n, 0)
			ts.Checkpoint, ts.Lag = &n, &lag
		}
		tp.Subscriptions = []tui.TopicSubscription{ts}
		out = append(out, tp)
	}
	return out, nil
}
