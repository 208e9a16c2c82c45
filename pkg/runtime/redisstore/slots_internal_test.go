package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/placement"
)

// crc16 is CRC-16/XMODEM, the checksum Redis Cluster hashes keys with.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// slot is the cluster slot of key: the CRC16 of its hash tag (the part
// between the first '{' and the next '}', when not empty) or else of the
// whole key, modulo 16384.
func slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16([]byte(key)) % 16384)
}

func TestSlotHelperMatchesRedisCluster(t *testing.T) {
	if got := crc16([]byte("123456789")); got != 0x31C3 {
		t.Fatalf("crc16 check value %#x, want 0x31c3", got)
	}
	// Values from CLUSTER KEYSLOT.
	for key, want := range map[string]int{"foo": 12182, "bar": 5061, "{foo}.x": 12182, "foo{}{bar}": slot("foo{}{bar}"), "{user1000}.following": 3443} {
		if got := slot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
	if slot("foo{}{bar}") == slot("bar") {
		t.Error("an empty tag must hash the whole key")
	}
}

// keyRecorder is a go-redis hook that records the keys of every script
// call and multi-key command the store sends.
type keyRecorder struct {
	mu    sync.Mutex
	calls []recorded
}

type recorded struct {
	sha  string // script hash, "" for a plain command
	name string
	keys []string
}

func (r *keyRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *keyRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.record(cmd)
		return next(ctx, cmd)
	}
}

func (r *keyRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			r.record(c)
		}
		return next(ctx, cmds)
	}
}

func (r *keyRecorder) record(cmd redis.Cmder) {
	args := cmd.Args()
	name := strings.ToLower(cmd.Name())
	var rec recorded
	switch name {
	case "evalsha", "eval":
		n, _ := strconv.Atoi(fmt.Sprint(args[2]))
		rec = recorded{name: name, sha: argString(args[1])}
		if name == "eval" {
			rec.sha = redis.NewScript(argString(args[1])).Hash()
		}
		for _, k := range args[3 : 3+n] {
			rec.keys = append(rec.keys, argString(k))
		}
	case "mget":
		rec = recorded{name: name}
		for _, k := range args[1:] {
			rec.keys = append(rec.keys, argString(k))
		}
	default:
		return
	}
	r.mu.Lock()
	r.calls = append(r.calls, rec)
	r.mu.Unlock()
}

func argString(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}

// TestEveryScriptsKeysShareASlot runs every operation with the keys the
// cluster layouts produce (a Kafka lease group's lease, and a Redis
// partition lease in broker.ClusterLayout) and checks that the keys of
// each script call, and of each multi-key command, hash to one slot. It
// also checks that the scenario ran every script of the package, so a new
// script cannot escape the check.
func TestEveryScriptsKeysShareASlot(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	rec := &keyRecorder{}
	c.AddHook(rec)
	s := New(c)
	ctx := context.Background()

	kafka := broker.Fence{LeaseKey: TopicLeaseGroup("shop", "orders").LeaseKey(3), Token: "node-a:1"}
	redisKey := broker.Fence{LeaseKey: broker.ClusterLayout.LeaseKey("app.Projector", "o-1"), Token: "node-a:2"}
	for _, f := range []broker.Fence{kafka, redisKey} {
		if err := c.Set(ctx, f.LeaseKey, f.Token, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	must("heartbeat", s.Heartbeat(ctx, runtime.NodeStatus{Service: "shop", Node: "node-a"}, time.Minute))
	must("heartbeat", s.Heartbeat(ctx, runtime.NodeStatus{Service: "shop", Node: "node-b"}, time.Minute))
	_, err := s.Members(ctx, "shop")
	must("members", err)
	must("leave", s.Leave(ctx, "shop", "node-b"))
	must("save", s.Save(ctx, kafka, TopicLeaseGroup("shop", "orders").String(), "sync", 3, 10))
	// Seeks (decision 0044): a free partition, a request, the owner's answer.
	lg := TopicLeaseGroup("shop", "orders")
	ten := int64(10)
	_, err = s.SetUnownedCheckpoint(ctx, lg, "sync", 4, &ten, 2)
	must("set unowned", err)
	_, err = s.RequestSeek(ctx, lg, "sync", 3, runtime.SeekRequest{ID: "s1", Next: 2, Lease: kafka.Token}, time.Minute)
	must("request seek", err)
	_, err = s.WithdrawSeek(ctx, lg, "sync", 3, "s0")
	must("withdraw seek", err)
	_, err = s.CompleteSeek(ctx, kafka, lg.String(), "sync", 3, runtime.SeekResult{ID: "s1", Status: runtime.SeekDone, Next: 2, Lease: kafka.Token})
	must("complete seek", err)
	for i, f := range []broker.Fence{kafka, redisKey} {
		token := "plan-" + strconv.Itoa(i)
		p := ledger.Parked{Subscription: "sync", Aggregate: "o-1"}
		must("park", s.Park(ctx, f, p))
		must("retry", s.RequestRetry(ctx, "sync", "", "o-1", "alice"))
		must("set status", s.SetStatus(ctx, f, "sync", "o-1", ledger.StatusParked))
		must("skip", s.RequestSkip(ctx, "sync", "", "o-1", "r", "alice"))
		got, err := s.GetParked(ctx, "sync", "", "o-1")
		must("get", err)
		must("pinned retry", s.RequestPinned(ctx, ledger.PinnedRequest{Action: ledger.ActionRetry,
			Subscription: "sync", Aggregate: "o-1", Pin: ledger.PinOf(got), Token: token}))
		must("resolve", s.Resolve(ctx, f, "sync", "o-1"))
		// The marker is found in the resolved record's slot.
		err = s.RequestPinned(ctx, ledger.PinnedRequest{Action: ledger.ActionRetry,
			Subscription: "sync", Aggregate: "o-1", Pin: ledger.PinOf(got), Token: token})
		if !errors.Is(err, ledger.ErrAlreadyRequested) {
			t.Fatalf("pinned retry after the resolve: %v, want already requested", err)
		}
	}

	must("cordon", s.CASNodeMode(ctx, "shop", "node-a", nil, &placement.ModeRecord{Node: "node-a", Mode: placement.Cordoned}))
	must("pin", s.CASPin(ctx, "shop", "sync", "o-1", nil, &placement.Pin{Scope: "sync", Partition: "o-1", Node: "node-a"}))
	_, err = s.ReadPlacement(ctx, "shop")
	must("read placement", err)

	scripts := map[string]string{}
	for name, sc := range map[string]*redis.Script{
		"placementcas": placementCAS,
		"heartbeat":    heartbeatScript, "members": membersScript, "leave": leaveScript,
		"checkpoint": checkpointScript, "park": parkScript, "setstatus": setStatusScript,
		"resolve": resolveScript, "request": requestScript, "unindex": unindexScript,
		"index": indexScript, "requestpinned": requestPinned, "requesttoken": requestToken,
		"seekset": seekSetScript, "seekrequest": seekRequestScript, "seekcomplete": seekCompleteScript,
		"seekwithdraw": seekWithdrawScript,
	} {
		scripts[sc.Hash()] = name
	}
	ran := map[string]bool{}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, call := range rec.calls {
		what := call.name
		if call.sha != "" {
			name, ok := scripts[call.sha]
			if !ok {
				t.Fatalf("a script not listed in this test ran (sha %s): add it", call.sha)
			}
			what, ran[name] = name, true
		}
		if len(call.keys) == 0 {
			t.Fatalf("%s ran without KEYS", what)
		}
		for _, k := range call.keys[1:] {
			if slot(k) != slot(call.keys[0]) {
				t.Fatalf("%s: key %q (slot %d) and %q (slot %d) are in different slots", what, call.keys[0], slot(call.keys[0]), k, slot(k))
			}
		}
	}
	for _, name := range scripts {
		if !ran[name] {
			t.Errorf("the scenario never ran %s.lua", name)
		}
	}
}

// TestISOTimeMatchesGo checks the prelude's date formatting against Go's
// for days around leap years, century rules and the epoch, in both zone
// forms (dead letters' failed_at uses +00:00).
func TestISOTimeMatchesGo(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	sc := newScript("return iso_time(tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3])")
	times := []time.Time{
		time.Unix(0, 0),
		time.Date(1999, 12, 31, 23, 59, 59, 999999000, time.UTC),
		time.Date(2000, 2, 29, 12, 0, 0, 1000, time.UTC),
		time.Date(2000, 3, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 2, 29, 1, 2, 3, 456789000, time.UTC),
		time.Date(2025, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(2100, 2, 28, 23, 59, 59, 0, time.UTC),
		time.Date(2100, 3, 1, 0, 0, 0, 0, time.UTC),
		time.Now().UTC().Truncate(time.Microsecond),
	}
	for d := time.Date(2023, 1, 1, 13, 14, 15, 0, time.UTC); d.Year() < 2029; d = d.Add(97 * time.Hour) {
		times = append(times, d)
	}
	for _, want := range times {
		got, err := sc.Run(ctx, c, nil, want.Unix(), want.Nanosecond()/1000, "Z").Text()
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := time.Parse(time.RFC3339Nano, got)
		if err != nil || !parsed.Equal(want) {
			t.Fatalf("iso_time(%d, %d) = %q, want %s", want.Unix(), want.Nanosecond()/1000, got, want.Format(time.RFC3339Nano))
		}
		got, err = sc.Run(ctx, c, nil, want.Unix(), want.Nanosecond()/1000, "+00:00").Text()
		if err != nil || got != want.Format("2006-01-02T15:04:05.000000+00:00") {
			t.Fatalf("iso_time(%d, %d, +00:00) = %q, %v; want %s", want.Unix(), want.Nanosecond()/1000, got, err, want.Format("2006-01-02T15:04:05.000000+00:00"))
		}
	}
}

// The keys the topic engine leases a partition at (Store.LeaseKeys, from
// the lease group the engine derives from the service) are the lease
// group's LeaseKey and GenerationKey, which the CLI reads and the
// checkpoint scripts fence on.
func TestLeaseKeysAreTheLeaseGroups(t *testing.T) {
	g := TopicLeaseGroup("shop", "orders")
	for _, p := range []int32{0, 3, 1023} {
		lease, gen := (&Store{}).LeaseKeys("shop|topic:orders", p)
		if lease != g.LeaseKey(p) || gen != g.GenerationKey(p) {
			t.Errorf("partition %d: LeaseKeys = %q, %q; the lease group's are %q, %q", p, lease, gen, g.LeaseKey(p), g.GenerationKey(p))
		}
	}
	if lease, _ := (&Store{}).LeaseKeys("shop|topic:orders", 3); lease != "protctl:{shop|topic:orders}:lease:3" {
		t.Errorf("lease key %q: the layout of docs/architecture.md changed", lease)
	}
}
