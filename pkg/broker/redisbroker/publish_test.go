package redisbroker_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

func TestPublishIsOneAtomicScript(t *testing.T) {
	server.FlushAll(t)
	c := server.Client(t)
	counter := &commandCounter{}
	c.AddHook(counter)
	b := redisbroker.New(c)
	publish(t, b, key, "", 1) // loads the script
	counter.reset()
	id, err := b.PublishPartitioned(t.Context(), cat, key, "", []byte(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if cmds := counter.reset(); !slices.Equal(cmds, []string{"evalsha"}) {
		t.Fatalf("publish sent %v, want one EVALSHA", cmds)
	}
	msgs := c.XRange(t.Context(), layout.Stream(cat, key), id, id).Val()
	if len(msgs) != 1 || fmt.Sprint(msgs[0].Values) != `map[data:{"a":1}]` {
		t.Fatalf("entry = %+v", msgs)
	}
	if m := c.SMembers(t.Context(), layout.IndexKey(cat)).Val(); !slices.Equal(m, []string{key}) {
		t.Fatalf("index = %v", m)
	}
}

func TestPublishWrongTypesChangeNothing(t *testing.T) {
	for _, corrupt := range []string{layout.Stream(cat, key), layout.IndexKey(cat)} {
		t.Run(corrupt, func(t *testing.T) {
			b, c := newBroker(t)
			c.Set(t.Context(), corrupt, "x", 0)
			before := snapshot(t, c)
			_, err := b.PublishPartitioned(t.Context(), cat, key, "", []byte("x"))
			want := "stream"
			if corrupt == layout.IndexKey(cat) {
				want = "set"
			}
			wantWrongType(t, "publish", err, corrupt, want)
			wantUnchanged(t, c, before)
		})
	}
}

func TestPublishLanes(t *testing.T) {
	b, c := newBroker(t)
	if _, err := b.PublishPartitioned(t.Context(), cat, key, "slow", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if n := c.XLen(t.Context(), layout.LaneStream(cat, key, "slow")).Val(); n != 1 {
		t.Fatalf("slow lane length = %d", n)
	}
	for _, lane := range []string{broker.DLQSuffix, "a:b"} {
		_, err := b.PublishPartitioned(t.Context(), cat, key, lane, []byte("x"))
		wantInvalid(t, "publish to lane "+lane, err, "lane")
	}
	_, err := b.PublishPartitioned(t.Context(), cat, "slow", "slow", []byte("x"))
	wantInvalid(t, "publish to a key named like its lane", err, "partition key")
	_, err = b.PublishPartitioned(t.Context(), "", key, "", []byte("x"))
	wantInvalid(t, "publish without category", err, "category")
}

func TestBackfillSuffixOption(t *testing.T) {
	b, _ := newBroker(t, redisbroker.WithBackfillSuffix("slow"))
	// With another backfill lane, "backfill" is an ordinary key...
	if err := b.RecordPartition(t.Context(), cat, broker.DefaultBackfillSuffix); err != nil {
		t.Fatal(err)
	}
	// ...and the configured suffix is refused.
	err := b.RecordPartition(t.Context(), cat, "slow")
	wantInvalid(t, "record the backfill suffix as key", err, "partition key")
	var ia *broker.InvalidArgumentError
	if errorsAs(err, &ia) && ia.Op != "record partition" {
		t.Fatalf("op = %q, want the caller's operation", ia.Op)
	}
}

func TestPartitionKeysIsOneCommand(t *testing.T) {
	server.FlushAll(t)
	c := server.Client(t)
	counter := &commandCounter{}
	c.AddHook(counter)
	b := redisbroker.New(c)
	pipe := c.Pipeline()
	for i := 0; i < 5000; i++ {
		pipe.SAdd(t.Context(), layout.IndexKey(cat), fmt.Sprint("k", i))
	}
	if _, err := pipe.Exec(t.Context()); err != nil {
		t.Fatal(err)
	}
	counter.reset()
	keys, err := b.PartitionKeys(t.Context(), cat)
	if err != nil || len(keys) != 5000 {
		t.Fatalf("keys = %d, %v", len(keys), err)
	}
	if cmds := counter.reset(); !slices.Equal(cmds, []string{"smembers"}) {
		t.Fatalf("PartitionKeys sent %v", cmds)
	}
}

func TestIndexCallsOnWrongTypes(t *testing.T) {
	b, c := newBroker(t)
	idx, reg := layout.IndexKey(cat), layout.GroupsKey(cat)
	c.Set(t.Context(), idx, "x", 0)
	c.RPush(t.Context(), reg, "x")
	before := snapshot(t, c)
	wantWrongType(t, "record", b.RecordPartition(t.Context(), cat, key), idx, "set")
	_, err := b.PartitionKeys(t.Context(), cat)
	wantWrongType(t, "keys", err, idx, "set")
	_, _, err = b.ScanPartitionKeys(t.Context(), cat, 0, 10)
	wantWrongType(t, "scan", err, idx, "set")
	wantWrongType(t, "register", b.RegisterGroup(t.Context(), cat, group), reg, "set")
	_, err = b.RegisteredGroups(t.Context(), cat)
	wantWrongType(t, "groups", err, reg, "set")
	_, err = b.Append(t.Context(), idx, []byte("x"))
	wantWrongType(t, "append", err, idx, "stream")
	wantUnchanged(t, c, before)
}

func TestIndexArguments(t *testing.T) {
	b := unreachableBroker(t)
	_, _, err := b.ScanPartitionKeys(t.Context(), cat, 0, 0)
	wantInvalid(t, "scan with count 0", err, "count")
	wantInvalid(t, "register no group", b.RegisterGroup(t.Context(), cat, ""), "group")
	_, err = b.RegisteredGroups(t.Context(), "")
	wantInvalid(t, "groups of no category", err, "category")
	_, err = b.Append(t.Context(), "", nil)
	wantInvalid(t, "append to no stream", err, "stream")
}

func TestCapabilitiesAndLayout(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	b := redisbroker.New(c)
	if b.Capabilities() != broker.StreamPartitioning || b.Layout() != broker.ProteanLayout {
		t.Fatalf("capabilities %s, layout %s", b.Capabilities(), b.Layout())
	}
	if l := redisbroker.New(c, redisbroker.WithLayout(broker.ClusterLayout)).Layout(); l != broker.ClusterLayout {
		t.Fatalf("layout = %s", l)
	}
}
