package partitioned_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/enginetest"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
	"github.com/protctl/protctl/pkg/runtime/pause"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

func withPauses(store *redisstore.Store) func(*partitioned.Config) {
	return func(c *partitioned.Config) { c.Pauses = store }
}

func operatorPaused(n *runtime.Node, key string) bool {
	return slices.Contains(subOf(n).Status().OperatorPaused, key)
}

// A key paused before the node starts is never read while the other keys
// flow; a key paused mid-stream stops at a batch boundary; after resume
// both are handled from where they stopped, in order, each entry exactly
// once.
func TestRedisOperatorPauseHoldsKeysWhileOthersFlow(t *testing.T) {
	ctx := context.Background()
	e := newRedisEnv(t)
	rec := newRecorder(t)
	keys := keyNames(6)
	hot, mid := keys[0], keys[1]
	publishAll(t, e.pub, keys, 1, 3)
	if _, err := e.store.SetPause(ctx, "", group, pause.Key(hot), "", "test", "hot key"); err != nil {
		t.Fatal(err)
	}
	n := e.start("node-1", rec.handler("node-1"), withPauses(e.store), nil)
	eventually(t, 30*time.Second, 10*time.Millisecond, "the others handled", func() bool { return rec.complete(wantAll(keys[1:], 3)) })
	eventually(t, 30*time.Second, 10*time.Millisecond, "the hot key held with its lease", func() bool { return operatorPaused(n, hot) })
	if got := rec.handled(hot); len(got) != 0 {
		t.Fatalf("paused key handled %v", got)
	}
	if _, err := e.store.SetPause(ctx, "", group, pause.Key(mid), "", "test", ""); err != nil {
		t.Fatal(err)
	}
	// Idle, the key's worker waits with its lease and is held once news
	// arrive: the pause must have reached the node first.
	eventually(t, 30*time.Second, 10*time.Millisecond, "the node saw the second pause", func() bool {
		return slices.Contains(partitioned.PauseSelectorsSeen(subOf(n)), pause.Key(mid))
	})
	publishAll(t, e.pub, keys, 4, 6)
	eventually(t, 30*time.Second, 10*time.Millisecond, "the second key held", func() bool { return operatorPaused(n, mid) })
	rest := keys[2:]
	eventually(t, 30*time.Second, 10*time.Millisecond, "the rest flow", func() bool { return rec.complete(wantAll(rest, 6)) })
	if got := rec.handled(hot); len(got) != 0 {
		t.Fatalf("paused key handled %v", got)
	}
	if got := rec.handled(mid); !slices.Equal(got, enginetest.SeqRange(1, 3)) {
		t.Fatalf("key paused mid-stream handled %v, want 1..3", got)
	}
	for _, k := range []string{hot, mid} {
		seen, err := e.store.ReadPause(ctx, "", group, pause.Key(k))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.RemovePause(ctx, "", group, pause.Key(k), seen); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, 10*time.Millisecond, "all handled after resume", func() bool { return rec.complete(wantAll(keys, 6)) })
	for _, k := range keys {
		if got := rec.handled(k); !slices.Equal(got, enginetest.SeqRange(1, 6)) {
			t.Errorf("key %s handled %v, want 1..6 once each in order", k, got)
		}
	}
	if st := subOf(n).Status(); len(st.OperatorPaused) != 0 {
		t.Errorf("still held after resume: %v", st.OperatorPaused)
	}
}

// A whole-subscription pause holds every key; a glob holds the keys it
// matches, including keys that appear after the pause. The owner hands a
// held key over to another node, which holds it too.
func TestRedisOperatorPauseAllGlobAndHandover(t *testing.T) {
	ctx := context.Background()
	e := newRedisEnv(t)
	rec := newRecorder(t)
	keys := []string{"a1", "a2", "b1", "b2"}
	publishAll(t, e.pub, keys, 1, 2)
	all, err := e.store.SetPause(ctx, "", group, pause.All, "", "test", "maintenance")
	if err != nil {
		t.Fatal(err)
	}
	n1 := e.start("node-1", rec.handler("node-1"), withPauses(e.store), nil)
	eventually(t, 30*time.Second, 10*time.Millisecond, "every key held", func() bool {
		return len(subOf(n1).Status().OperatorPaused) == len(keys)
	})
	glob, err := e.store.SetPause(ctx, "", group, pause.Glob("a*"), "", "test", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.RemovePause(ctx, "", group, pause.All, all); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, 10*time.Millisecond, "b keys flow", func() bool { return rec.complete(wantAll([]string{"b1", "b2"}, 2)) })
	publishAll(t, e.pub, []string{"a3"}, 1, 1)
	n2 := e.start("node-2", rec.handler("node-2"), withPauses(e.store), nil)
	eventually(t, 30*time.Second, 10*time.Millisecond, "the a keys held across both nodes", func() bool {
		held := append(subOf(n1).Status().OperatorPaused, subOf(n2).Status().OperatorPaused...)
		slices.Sort(held)
		return slices.Equal(held, []string{"a1", "a2", "a3"}) && len(subOf(n2).Assigned()) > 0
	})
	for _, k := range []string{"a1", "a2", "a3"} {
		if got := rec.handled(k); len(got) != 0 {
			t.Fatalf("paused key %s handled %v", k, got)
		}
	}
	if _, err := e.store.RemovePause(ctx, "", group, pause.Glob("a*"), glob); err != nil {
		t.Fatal(err)
	}
	want := wantAll(keys, 2)
	want["a3"] = 1
	eventually(t, 30*time.Second, 10*time.Millisecond, "all handled after resume", func() bool { return rec.complete(want) })
	for k, n := range want {
		if got := rec.handled(k); !slices.Equal(got, enginetest.SeqRange(1, n)) {
			t.Errorf("key %s handled %v, want 1..%d once each", k, got, n)
		}
	}
}

// A stale pause change (the entry is not as seen) changes nothing.
func TestRedisPauseStaleChangeRefused(t *testing.T) {
	ctx := context.Background()
	e := newRedisEnv(t)
	seen, err := e.store.SetPause(ctx, "", group, pause.Key("k"), "", "alice", "one")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.SetPause(ctx, "", group, pause.Key("k"), "", "bob", "two"); err == nil {
		t.Fatal("second pause over an unseen entry succeeded")
	}
	if _, err := e.store.RemovePause(ctx, "", group, pause.Key("k"), "other"); err == nil {
		t.Fatal("remove of a changed entry succeeded")
	}
	set, err := e.store.ReadPauses(ctx, "", group)
	if err != nil {
		t.Fatal(err)
	}
	if len(set) != 1 || set[0].By != "alice" || set[0].Reason != "one" || set[0].At.IsZero() {
		t.Fatalf("entries = %+v", set)
	}
	if raw, _ := e.store.ReadPause(ctx, "", group, pause.Key("k")); raw != seen {
		t.Fatalf("raw %q, want %q", raw, seen)
	}
}
