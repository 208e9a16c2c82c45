package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/audit"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// opsEnv is a redis-server holding testenv.ProteanStandard's scenario:
// the state a Protean deployment leaves, written with plain Redis
// commands, for the operator commands to read and repair.
type opsEnv struct {
	t   *testing.T
	srv *testenv.Redis
	c   redis.UniversalClient
	s   testenv.ProteanScenario
}

func newOpsEnv(t *testing.T) *opsEnv {
	t.Helper()
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	return &opsEnv{t: t, srv: srv, c: c, s: testenv.ProteanStandard(t, c)}
}

// cli is a protctl invocation against the env's server.
func (e *opsEnv) cli(tty bool) *cli {
	e.t.Helper()
	cl := newCLI(e.t)
	cl.env["PROTCTL_REDIS"] = e.srv.URL()
	cl.tty = tty
	return cl
}

// run runs protctl without a terminal.
func (e *opsEnv) run(args ...string) result {
	e.t.Helper()
	return e.cli(false).run(args...)
}

func (e *opsEnv) lease(group, key string) string {
	e.t.Helper()
	v, err := e.c.Get(context.Background(), broker.ProteanLayout.LeaseKey(group, key)).Result()
	if err == redis.Nil {
		return ""
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

// park writes a failure ledger entry for the halted partition's head, as
// protctl's runtime would under the partition's lease.
func (e *opsEnv) park() ledger.Parked {
	e.t.Helper()
	s := e.s
	p := ledger.Parked{
		Subscription: s.Projector, Source: source.Redis, Aggregate: s.Halted,
		Category: s.Orders, Partition: s.Halted, Position: s.HaltedIDs[0],
		Stream: broker.ProteanLayout.Stream(s.Orders, s.Halted), Error: "handler: amount must be positive",
		Attempts: 3, ParkedAt: time.Date(2026, 3, 1, 12, 0, 5, 250e6, time.UTC),
		LastAttemptAt: time.Date(2026, 3, 1, 12, 0, 5, 250e6, time.UTC),
		Owner:         s.HaltedOwner, Generation: s.HaltedGeneration,
	}
	f := broker.Fence{LeaseKey: broker.ProteanLayout.LeaseKey(s.Projector, s.Halted), Token: s.HaltedToken}
	if err := redisstore.New(e.c).Park(context.Background(), f, p); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// digest sums up every key's type, value and whether it expires, so a
// test can prove a command changed nothing, except the audit log (an
// apply that tried an item and conflicted is recorded there, having
// changed nothing; audit_test.go counts its entries). Streams are DUMPed (which
// covers their consumer groups and pending lists); sets, hashes and sorted
// sets are read in sorted order, because a DUMP of a hash table follows
// its iteration order, which a mere lookup can change by rehashing.
func (e *opsEnv) digest() string {
	e.t.Helper()
	ctx := context.Background()
	keys, err := e.c.Keys(ctx, "*").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	slices.Sort(keys)
	h := sha256.New()
	for _, k := range keys {
		if k == audit.Key {
			continue
		}
		typ, err := e.c.Type(ctx, k).Result()
		if err != nil {
			e.t.Fatal(err)
		}
		var val string
		switch typ {
		case "set":
			m, err := e.c.SMembers(ctx, k).Result()
			if err != nil {
				e.t.Fatal(err)
			}
			slices.Sort(m)
			val = strings.Join(m, "\x00")
		case "hash":
			m, err := e.c.HGetAll(ctx, k).Result()
			if err != nil {
				e.t.Fatal(err)
			}
			var kv []string
			for f, v := range m {
				kv = append(kv, f+"="+v)
			}
			slices.Sort(kv)
			val = strings.Join(kv, "\x00")
		case "zset":
			zs, err := e.c.ZRangeWithScores(ctx, k, 0, -1).Result()
			if err != nil {
				e.t.Fatal(err)
			}
			for _, z := range zs {
				val += fmt.Sprintf("%v=%v\x00", z.Member, z.Score)
			}
		default:
			if val, err = e.c.Dump(ctx, k).Result(); err != nil {
				e.t.Fatal(err)
			}
		}
		ttl, err := e.c.PTTL(ctx, k).Result()
		if err != nil {
			e.t.Fatal(err)
		}
		h.Write([]byte(k + "\x00" + typ + "\x00" + val + "\x00" + strconv.FormatBool(ttl > 0) + "\x00"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// goldenJSON compares a command's JSON document (stdout) with
// testdata/golden/<name>.json after normalising what varies between runs
// (see normalizeJSON). go test -update rewrites the file.
func goldenJSON(t *testing.T, name, got string) {
	t.Helper()
	norm := normalizeJSON(t, got)
	path := filepath.Join("testdata", "golden", name+".json")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(norm), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(want) != norm {
		t.Fatalf("%s differs from the output (go test -update rewrites it)\n--- got (normalised):\n%s\n--- raw:\n%s", path, norm, got)
	}
}

// Volatile values: fields that hold times and durations measured now,
// stream ids minted by XADD *, and durations and times inside sentences.
var (
	volatileFields = map[string]bool{
		"ttlMs": true, "idleMs": true, "createdAt": true, "serverTime": true, "parkedAt": true,
		"lastAttemptAt": true, "requestedAt": true, "startedAt": true, "lastSeen": true, "time": true,
		"lagSeconds": true, "headIdleMs": true,
	}
	streamIDRe = regexp.MustCompile(`\b\d{13}-\d+\b`)
	planIDRe   = regexp.MustCompile(`^[0-9a-f]{32}$`) // repair's random plan ids
	timeRe     = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
	durationRe = regexp.MustCompile(`\b\d+(\.\d+)?(ms|d|h|m|s)(\d+(\.\d+)?(ms|h|m|s))*\b`)
)

// normalizeJSON re-indents doc with volatile values replaced: fields
// named in volatileFields become "<volatile>" unless null; stream ids
// become <id> (XADD * mints them from the clock, and two streams can share
// one, so not even their order is stable), plan ids <plan-id>; times and durations inside
// strings become <time> and <dur>. Keys come out sorted. It fails the test
// when doc is not one JSON value.
func normalizeJSON(t *testing.T, doc string) string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, doc)
	}
	if dec.More() {
		t.Fatalf("more than one JSON document:\n%s", doc)
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, val := range x {
				if volatileFields[k] && val != nil {
					x[k] = "<volatile>"
					continue
				}
				x[k] = walk(val)
			}
			return x
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
			return x
		case string:
			s := planIDRe.ReplaceAllString(x, "<plan-id>")
			s = streamIDRe.ReplaceAllString(s, "<id>")
			s = timeRe.ReplaceAllString(s, "<time>")
			return durationRe.ReplaceAllString(s, "<dur>")
		}
		return v
	}
	v = walk(v)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// decode parses a JSON document into v, failing the test otherwise.
func decode(t *testing.T, doc string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(doc), v); err != nil {
		t.Fatalf("decoding %v\n%s", err, doc)
	}
}

// plannedItem is the part of a plan item the tests look at.
type plannedItem struct {
	Action       string `json:"action"`
	Allowed      bool   `json:"allowed"`
	Reason       string `json:"reason"`
	Result       *string
	Detail       string `json:"detail"`
	Precondition struct {
		Lease *string `json:"lease"`
		Trim  *struct {
			Floor    *string `json:"floor"`
			PinnedBy string  `json:"pinnedBy"`
			Removes  int64   `json:"removes"`
		} `json:"trim"`
	} `json:"precondition"`
	Target map[string]string `json:"target"`
}

type plannedDoc struct {
	Kind  string        `json:"kind"`
	Items []plannedItem `json:"items"`
}

func (it plannedItem) result() string {
	if it.Result == nil {
		return ""
	}
	return *it.Result
}

// UnmarshalJSON keeps result's null apart from a missing field.
func (it *plannedItem) UnmarshalJSON(b []byte) error {
	type plain plannedItem
	var p struct {
		plain
		Result *string `json:"result"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*it = plannedItem(p.plain)
	it.Result = p.Result
	return nil
}
