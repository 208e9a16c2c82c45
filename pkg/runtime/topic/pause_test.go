package topic_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/runtime/pause"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

// Operators' pauses on the Kafka topic engine (pause.go), against
// kfake and a real redis-server.

func (e *topicEnv) pauses() *redisstore.Store {
	e.t.Helper()
	s, ok := e.store.(*redisstore.Store)
	if !ok {
		e.t.Fatal("pause tests need the Redis store")
	}
	return s
}

func (e *topicEnv) pause(sub string, sel pause.Selector) {
	e.t.Helper()
	if _, err := e.pauses().SetPause(context.Background(), e.leaseGroup().String(), sub, sel, "", "test", "testing"); err != nil {
		e.t.Fatal(err)
	}
}

func (e *topicEnv) resume(sub string, sel pause.Selector) {
	e.t.Helper()
	s := e.pauses()
	ctx := context.Background()
	seen, err := s.ReadPause(ctx, e.leaseGroup().String(), sub, sel)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := s.RemovePause(ctx, e.leaseGroup().String(), sub, sel, seen); err != nil {
		e.t.Fatal(err)
	}
}

// seqs returns 1..n.
func seqs(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

// pausedOn reports whether node n's subscription sub holds agg back with
// records waiting (Members().OperatorPaused).
func pausedOn(n *topicNode, sub, agg string) bool {
	for _, m := range n.ts.Members() {
		if m.Name == sub && slices.Contains(m.OperatorPaused, agg) {
			return true
		}
	}
	return false
}

// TestTopicPauseHoldsAggregate: a paused aggregate's records are held
// while the other aggregates flow; when held records fill the window the
// partition is throttled; the checkpoint never passes the first held
// record; on resume the held records are handled in order, each once.
func TestTopicPauseHoldsAggregate(t *testing.T) {
	e := newTopicEnv(t, onRedis, 2)
	rec := newTopicRecorder(t)
	cfg := e.config(tsub(topicSub, rec.handler("n1")))
	cfg.MaxInFlight = 16
	cfg.Pauses = e.pauses()
	audit := &auditedCheckpoints{Checkpoints: e.store, rec: rec}
	cfg.Checkpoints = audit
	n := e.start("n1", cfg, nil)
	defer e.stopAll()
	awaitStarted(t, n.ts)
	aggs := aggNames(4) // a0000, a0002 on partition 0; a0001, a0003 on 1
	e.produce(aggs, 1, 3)
	waitFor(t, 10*time.Second, "seq 1..3 handled", func() bool { return rec.complete(topicSub, aggs, 3) })

	e.pause(topicSub, pause.Key("a0000"))
	sr := n.ts.Subscription(topicSub)
	waitFor(t, 10*time.Second, "the node to read the pause", func() bool { return len(sr.Pauses()) == 1 })
	e.produce(aggs, 4, 60)
	waitFor(t, 20*time.Second, "partition 1 to flow", func() bool { return rec.complete(topicSub, []string{"a0001", "a0003"}, 60) })
	waitFor(t, 10*time.Second, "a0000 shown paused", func() bool { return pausedOn(n, topicSub, "a0000") })
	waitFor(t, 10*time.Second, "partition 0 throttled by the held records", func() bool {
		return slices.Contains(n.ts.Throttled(), 0)
	})
	if got := rec.handled(topicSub, "a0000"); !slices.Equal(got, seqs(3)) {
		t.Fatalf("paused a0000 handled %v, want only 1..3 (before the pause)", got)
	}
	if st := n.ts.Status(); !slices.Contains(st.OperatorPaused, topicSub+"/a0000") {
		t.Fatalf("status operatorPaused %v, want %s/a0000", st.OperatorPaused, topicSub)
	}
	// The checkpoint waits at the first held record.
	e.resume(topicSub, pause.Key("a0000"))
	waitFor(t, 20*time.Second, "everything handled after the resume", func() bool { return rec.complete(topicSub, aggs, 60) })
	if got := rec.handled(topicSub, "a0000"); !slices.Equal(got, seqs(60)) {
		t.Fatalf("a0000 handled %v, want 1..60 exactly once, in order", got)
	}
	rec.checkOrder(t, topicSub, aggs, 60)
	waitFor(t, 5*time.Second, "a0000 no longer shown paused", func() bool { return !pausedOn(n, topicSub, "a0000") })
	e.stop(n)
	saves, violations := audit.report()
	if len(violations) > 0 {
		t.Fatalf("checkpoints passed records not handled: %v", violations)
	}
	if saves == 0 {
		t.Fatal("no checkpoint saved")
	}
	// A restart after the resume reads nothing again and loses nothing.
	heads := e.heads()
	for p, h := range heads {
		if c, _ := e.checkpoint(topicSub, p); c != h {
			t.Fatalf("partition %d: checkpoint %d after the resume, want the head %d", p, c, h)
		}
	}
}

// TestTopicPauseWholeSubscription: "all" holds every aggregate of the
// subscription while another subscription of the topic flows; the resume
// handles everything in order, each once.
func TestTopicPauseWholeSubscription(t *testing.T) {
	e := newTopicEnv(t, onRedis, 2)
	rec := newTopicRecorder(t)
	const other = "search-index"
	cfg := e.config(tsub(topicSub, rec.handler("n1")), tsub(other, rec.handler("n1")))
	cfg.Pauses = e.pauses()
	e.pause(topicSub, pause.All)
	n := e.start("n1", cfg, nil)
	defer e.stopAll()
	awaitStarted(t, n.ts)
	aggs := aggNames(4)
	e.produce(aggs, 1, 20)
	waitFor(t, 20*time.Second, "the other subscription to flow", func() bool { return rec.complete(other, aggs, 20) })
	waitFor(t, 10*time.Second, "every aggregate shown paused", func() bool {
		for _, a := range aggs {
			if !pausedOn(n, topicSub, a) {
				return false
			}
		}
		return true
	})
	for _, a := range aggs {
		if got := rec.handled(topicSub, a); len(got) > 0 {
			t.Fatalf("%s handled %v while the subscription was paused", a, got)
		}
	}
	for p := range e.heads() {
		if c, ok := e.checkpoint(topicSub, p); ok && c > 0 {
			t.Fatalf("partition %d: checkpoint %d passed held records", p, c)
		}
	}
	e.resume(topicSub, pause.All)
	waitFor(t, 20*time.Second, "everything handled after the resume", func() bool { return rec.complete(topicSub, aggs, 20) })
	for _, a := range aggs {
		if got := rec.handled(topicSub, a); !slices.Equal(got, seqs(20)) {
			t.Fatalf("%s handled %v, want 1..20 exactly once, in order", a, got)
		}
	}
}

// TestTopicPauseSurvivesOwnerLoss: the owner of a paused aggregate's
// partition dies (no handoff, no release); the node that takes the
// partition over reads the pause before it handles anything, holds the
// aggregate, and handles its records in order, once, after the resume.
func TestTopicPauseSurvivesOwnerLoss(t *testing.T) {
	e := newTopicEnv(t, onRedis, 2)
	rec := newTopicRecorder(t)
	audit := &auditedCheckpoints{Checkpoints: e.store, rec: rec}
	mk := func(node string) topic.Config {
		cfg := e.config(tsub(topicSub, rec.handler(node)))
		cfg.Pauses = e.pauses()
		cfg.Checkpoints = audit
		return cfg
	}
	n1 := e.start("n1", mk("n1"), nil)
	defer e.stopAll()
	awaitStarted(t, n1.ts)
	aggs := aggNames(4)
	e.pause(topicSub, pause.Glob("a000[02]")) // both of partition 0
	waitFor(t, 10*time.Second, "n1 to read the pause", func() bool { return len(n1.ts.Subscription(topicSub).Pauses()) == 1 })
	e.produce(aggs, 1, 10)
	waitFor(t, 20*time.Second, "partition 1 to flow", func() bool { return rec.complete(topicSub, []string{"a0001", "a0003"}, 10) })
	waitFor(t, 10*time.Second, "n1 holding a0000", func() bool { return pausedOn(n1, topicSub, "a0000") })

	e.kill(n1)
	n2 := e.start("n2", mk("n2"), nil)
	awaitStarted(t, n2.ts)
	waitFor(t, 20*time.Second, "n2 to hold both partitions", func() bool { return len(n2.ts.Held()) == 2 })
	e.produce(aggs, 11, 20)
	waitFor(t, 20*time.Second, "partition 1 to flow on n2", func() bool { return rec.complete(topicSub, []string{"a0001", "a0003"}, 20) })
	waitFor(t, 10*time.Second, "n2 holding a0000 and a0002", func() bool {
		return pausedOn(n2, topicSub, "a0000") && pausedOn(n2, topicSub, "a0002")
	})
	for _, a := range []string{"a0000", "a0002"} {
		if got := rec.handled(topicSub, a); len(got) > 0 {
			t.Fatalf("paused %s handled %v across the failover", a, got)
		}
	}
	e.resume(topicSub, pause.Glob("a000[02]"))
	waitFor(t, 20*time.Second, "everything handled after the resume", func() bool { return rec.complete(topicSub, aggs, 20) })
	for _, a := range []string{"a0000", "a0002"} {
		if got := rec.handled(topicSub, a); !slices.Equal(got, seqs(20)) {
			t.Fatalf("%s handled %v, want 1..20 exactly once, in order", a, got)
		}
	}
	rec.checkOrder(t, topicSub, aggs, 20)
	if _, violations := audit.report(); len(violations) > 0 {
		t.Fatalf("checkpoints passed records not handled: %v", violations)
	}
}
