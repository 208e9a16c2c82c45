package inspect_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
)

// normalized drops what moves between two reads of the same state (the
// server's clock: idle times and TTLs left), keeping whether each is
// known, so that two listings compare as JSON.
func normalized(t *testing.T, ps []inspect.Partition) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range ps {
		if p.IdleMs != nil {
			p.IdleMs = new(int64)
		}
		gs := make([]inspect.Group, len(p.Groups))
		for i, g := range p.Groups {
			if g.Lease != nil {
				l := *g.Lease
				if l.TTLMs != nil {
					l.TTLMs = new(int64)
				}
				g.Lease = &l
			}
			gs[i] = g
		}
		p.Groups = gs
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		out[p.Key] = string(b)
	}
	return out
}

// The scripted reads of a single server and the pipelined reads of a
// cluster must see the same partitions: every case of the standard
// fixture (held, expired and missing leases, a backfill lane with its own
// pending entry, a halted head, a group never created, a ghost), plus a
// key of the wrong type and a group whose lag Redis cannot tell.
func TestScriptedReadsMatchPipelinedReads(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	s := testenv.ProteanStandard(t, c)
	c.SAdd(ctx, s.Orders+":__partitions__", "o-str")
	c.Set(ctx, s.Orders+":o-str", "not a stream", 0)
	c.HSet(ctx, s.Orders+":o-cold:backfill", "f", "a hash where a lane should be")
	// An entry deleted inside the read range makes the group's lag unknown.
	ids := c.XRange(ctx, s.Orders+":o-lagging", "-", "+").Val()
	c.XDel(ctx, s.Orders+":o-lagging", ids[5].ID)

	scripted := inspect.New(c, broker.ProteanLayout)
	pipelined := inspect.New(c, broker.ProteanLayout, inspect.WithPipelinedReads())
	for _, category := range []string{s.Orders, s.Payments} {
		for _, group := range []string{"", s.Projector} {
			opts := inspect.PartitionOptions{Group: group, LaneGroups: true}
			a, err := scripted.Partitions(ctx, category, opts)
			if err != nil {
				t.Fatal(err)
			}
			b, err := pipelined.Partitions(ctx, category, opts)
			if err != nil {
				t.Fatal(err)
			}
			na, nb := normalized(t, a), normalized(t, b)
			if len(na) != len(nb) || len(na) == 0 {
				t.Fatalf("%s: scripted listed %d partitions, pipelined %d", category, len(na), len(nb))
			}
			for k, v := range nb {
				if na[k] != v {
					t.Errorf("%s %s (group %q):\n scripted  %s\n pipelined %s", category, k, group, na[k], v)
				}
			}
		}
	}
	if scripted.ScriptsRefused() {
		t.Error("the scripted inspector fell back to pipelined reads")
	}
	// The cases above were read: the wrong types are reported, the lag
	// unknown.
	ps, _ := scripted.Partitions(ctx, s.Orders, inspect.PartitionOptions{})
	m := byKey(t, ps)
	if m["o-str"].Error == "" || m["o-cold"].Error == "" {
		t.Errorf("wrong types not reported: %q, %q", m["o-str"].Error, m["o-cold"].Error)
	}
	if g, _ := m["o-lagging"].Group(s.Projector); g.Lag != nil {
		t.Errorf("o-lagging lag = %d, want unknown after an XDEL in the unread range", *g.Lag)
	}
}

// A user the server refuses scripts to still lists partitions: the
// Inspector falls back to pipelined reads, once.
func TestScriptsRefusedFallBackToPipelinedReads(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t, testenv.WithACLUser("noscripts", "pw-7f3a", "~*", "+@read", "-evalsha_ro", "-eval_ro", "-evalsha", "-eval", "+time", "+ping", "+hello"))
	admin := srv.Client(t)
	s := testenv.ProteanStandard(t, admin)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "noscripts", Password: "pw-7f3a"})
	t.Cleanup(func() { c.Close() })

	in := inspect.New(c, broker.ProteanLayout)
	ps, err := in.Partitions(ctx, s.Orders, inspect.PartitionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !in.ScriptsRefused() {
		t.Error("scripts were refused but the Inspector did not record it")
	}
	want, err := inspect.New(admin, broker.ProteanLayout).Partitions(ctx, s.Orders, inspect.PartitionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	na, nb := normalized(t, ps), normalized(t, want)
	if len(na) != len(nb) {
		t.Fatalf("listed %d partitions without scripts, %d with", len(na), len(nb))
	}
	for k, v := range nb {
		if na[k] != v {
			t.Errorf("%s:\n without scripts %s\n with scripts    %s", k, na[k], v)
		}
	}
}
