package memorybroker

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// TestPELMatchesAModel drives one group's pending list through random
// deliveries, acks, claims and drops and compares, after every step, the
// group's and each consumer's pending ids (in order) with a plain map.
// The lazy id orders (stale ids skipped, swept and compacted) must never
// show an id twice, lose one, or list it under the wrong consumer.
func TestPELMatchesAModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	g := newGroup(broker.StreamID{})
	now := time.Unix(0, 0)
	names := []string{"a:1", "b:2", "c:3"}
	model := map[broker.StreamID]string{} // id -> consumer
	var next uint64

	for step := range 5000 {
		switch op := rng.IntN(10); {
		case op < 3: // deliver a few new ids to one consumer
			c := g.consumer(names[rng.IntN(len(names))], now)
			for range 1 + rng.IntN(2) {
				next++
				id := broker.StreamID{Ms: next}
				g.deliver(c, id, now)
				model[id] = c.name
			}
		case op < 8: // ack a random pending id (or one never pending)
			id := randomID(rng, model, next)
			_, was := model[id]
			if g.ack(id) != was {
				t.Fatalf("step %d: ack(%s) = %v, model says pending=%v", step, id, !was, was)
			}
			delete(model, id)
		default: // claim a random pending id for another consumer
			id := randomID(rng, model, next)
			p := g.pel[id]
			if p == nil {
				continue
			}
			c := g.consumer(names[rng.IntN(len(names))], now)
			g.move(p, id, c)
			model[id] = c.name
		}
		checkPEL(t, step, g, model)
	}
}

func randomID(rng *rand.Rand, model map[broker.StreamID]string, next uint64) broker.StreamID {
	if len(model) > 0 && rng.IntN(8) > 0 {
		ids := make([]broker.StreamID, 0, len(model))
		for id := range model {
			ids = append(ids, id)
		}
		slices.SortFunc(ids, broker.StreamID.Compare)
		return ids[rng.IntN(len(ids))]
	}
	return broker.StreamID{Ms: rng.Uint64N(next + 2)}
}

func checkPEL(t *testing.T, step int, g *group, model map[broker.StreamID]string) {
	t.Helper()
	var all []broker.StreamID
	byConsumer := map[string][]broker.StreamID{}
	for id, c := range model {
		all = append(all, id)
		byConsumer[c] = append(byConsumer[c], id)
	}
	slices.SortFunc(all, broker.StreamID.Compare)
	var got []broker.StreamID
	g.order.each(g.isPending, func(id broker.StreamID) bool { got = append(got, id); return true })
	if !slices.Equal(got, all) {
		t.Fatalf("step %d: group order %v, want %v", step, got, all)
	}
	if first, ok := g.oldestPending(); ok != (len(all) > 0) || (ok && first != all[0]) {
		t.Fatalf("step %d: oldest pending %v %v", step, first, ok)
	}
	for name, c := range g.consumers {
		want := byConsumer[name]
		slices.SortFunc(want, broker.StreamID.Compare)
		got = got[:0]
		c.order.each(g.owns(c), func(id broker.StreamID) bool { got = append(got, id); return true })
		if !slices.Equal(got, want) || c.npending != len(want) {
			t.Fatalf("step %d: consumer %s order %v (npending %d), want %v", step, name, got, c.npending, want)
		}
		if len(c.order.ids)-c.order.head > 3*len(want)+64 {
			t.Fatalf("step %d: consumer %s keeps %d ids for %d pending", step, name, len(c.order.ids)-c.order.head, len(want))
		}
	}
}
