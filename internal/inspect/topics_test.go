package inspect_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// topicFixture lays down service "shop", topic "orders" (3 partitions):
//
//	p0: 5 records, lease node-a:4 held, ledger at 3 (lag 2), fraud at 5 (lag 0)
//	p1: 3 records, generation 2, lease expired, ledger at 1 (lag 2)
//	p2: empty, never leased
func topicFixture(t *testing.T) (*redis.Client, *kafkasource.Source) {
	t.Helper()
	ctx := context.Background()
	k := testenv.StartKafka(t, 3, "orders", "payments")
	cl := k.Client(t)
	var recs []*kgo.Record
	for i := range 8 {
		p := int32(0)
		if i >= 5 {
			p = 1
		}
		recs = append(recs, &kgo.Record{Topic: "orders", Partition: p, Value: []byte("v")})
	}
	k.Produce(t, cl, recs...)

	c := testenv.StartRedis(t).Client(t)
	store := redisstore.New(c)
	g := redisstore.TopicLeaseGroup("shop", "orders")
	save := func(p int32, token, sub string, next int64) {
		t.Helper()
		f := broker.Fence{LeaseKey: g.LeaseKey(p), Token: token}
		if err := c.Set(ctx, f.LeaseKey, token, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if err := store.Save(ctx, f, g.String(), sub, p, next); err != nil {
			t.Fatal(err)
		}
	}
	save(0, "node-a:4", "ledger", 3)
	save(0, "node-a:4", "fraud", 5)
	c.Set(ctx, g.GenerationKey(0), "4", 0)
	save(1, "node-b:2", "ledger", 1)
	c.Del(ctx, g.LeaseKey(1))
	c.Set(ctx, g.GenerationKey(1), "2", 0)

	src, err := kafkasource.New(k.Brokers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	return c, src
}

func TestTopicSnapshot(t *testing.T) {
	ctx := context.Background()
	c, src := topicFixture(t)
	in := inspect.New(c, broker.ProteanLayout)
	tp, err := in.Topic(ctx, src, "shop", "orders", inspect.TopicOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tp.LeaseGroup != "shop|topic:orders" || strings.Join(tp.Subscriptions, ",") != "fraud,ledger" || len(tp.Partitions) != 3 {
		t.Fatalf("topic %+v", tp)
	}
	p0, p1, p2 := tp.Partitions[0], tp.Partitions[1], tp.Partitions[2]
	if p0.State != inspect.LeaseHeld || val(t, "owner", p0.Owner) != "node-a" || val(t, "generation", p0.Generation) != 4 || val(t, "ttl", p0.TTLMs) <= 0 {
		t.Errorf("p0 lease %+v", p0)
	}
	if p0.HeadOffset != "5" || p0.EarliestOffset != "0" {
		t.Errorf("p0 watermarks %s..%s", p0.EarliestOffset, p0.HeadOffset)
	}
	// subscriptions sorted: fraud, ledger
	if val(t, "fraud checkpoint", p0.Subscriptions[0].Checkpoint) != "5" || val(t, "fraud lag", p0.Subscriptions[0].Lag) != 0 {
		t.Errorf("p0 fraud %+v", p0.Subscriptions[0])
	}
	if val(t, "ledger checkpoint", p0.Subscriptions[1].Checkpoint) != "3" || val(t, "ledger lag", p0.Subscriptions[1].Lag) != 2 {
		t.Errorf("p0 ledger %+v", p0.Subscriptions[1])
	}
	if p1.State != inspect.LeaseExpired || p1.Owner != nil || val(t, "p1 generation", p1.Generation) != 2 || p1.HeadOffset != "3" {
		t.Errorf("p1 %+v", p1)
	}
	if p1.Subscriptions[0].Checkpoint != nil || p1.Subscriptions[0].Lag != nil || val(t, "p1 ledger lag", p1.Subscriptions[1].Lag) != 2 {
		t.Errorf("p1 subscriptions %+v", p1.Subscriptions)
	}
	if p2.State != inspect.LeaseFree || p2.Generation != nil || p2.HeadOffset != "0" {
		t.Errorf("p2 %+v", p2)
	}

	raw, err := json.Marshal(p0)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"partition":0`, `"owner":"node-a"`, `"generation":4`, `"state":"held"`, `"headOffset":"5"`, `"earliestOffset":"0"`, `"checkpoint":"3"`, `"lag":2`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("JSON %s lacks %s", raw, want)
		}
	}
}

func TestTopicsNamedSubscriptionsAndDiscovery(t *testing.T) {
	ctx := context.Background()
	c, src := topicFixture(t)
	in := inspect.New(c, broker.ProteanLayout)

	tp, err := in.Topic(ctx, src, "shop", "orders", inspect.TopicOptions{Subscriptions: []string{"ledger", "audit"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(tp.Subscriptions, ",") != "audit,ledger" || tp.Partitions[0].Subscriptions[0].Checkpoint != nil {
		t.Fatalf("named subscriptions: %+v", tp)
	}

	// Without topics: those with keys in Redis ("payments" has none).
	all, err := in.Topics(ctx, src, "shop", nil, inspect.TopicOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].Topic != "orders" || len(all[0].Partitions) != 3 {
		t.Fatalf("discovered %+v", all)
	}
	// Another service sees nothing.
	if other, err := in.Topics(ctx, src, "billing", nil, inspect.TopicOptions{}); err != nil || len(other) != 0 {
		t.Fatalf("service billing: %v, %+v", err, other)
	}
}

func TestTopicUnknownToKafka(t *testing.T) {
	ctx := context.Background()
	c, src := topicFixture(t)
	in := inspect.New(c, broker.ProteanLayout)
	_, err := in.Topic(ctx, src, "shop", "nope", inspect.TopicOptions{})
	if !errors.Is(err, inspect.ErrNotFound) || !errors.Is(err, kafkasource.ErrTopicNotFound) {
		t.Fatalf("unknown topic: %v", err)
	}

	// A topic with Redis keys that Kafka no longer has is listed with an
	// error when discovered.
	g := redisstore.TopicLeaseGroup("shop", "gone")
	c.Set(ctx, g.GenerationKey(0), "1", 0)
	all, err := in.Topics(ctx, src, "shop", nil, inspect.TopicOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Topic != "gone" || all[0].Error == "" {
		t.Fatalf("discovered %+v", all)
	}
}

func TestTopicKafkaUnreachable(t *testing.T) {
	c := testenv.StartRedis(t).Client(t)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	src, err := kafkasource.New([]string{"127.0.0.1:" + strconv.Itoa(port)}, kafkasource.WithRetry(1, time.Second), kafkasource.WithDialTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = inspect.New(c, broker.ProteanLayout).Topic(ctx, src, "shop", "orders", inspect.TopicOptions{Subscriptions: []string{"s"}})
	if !errors.Is(err, broker.ErrUnavailable) {
		t.Fatalf("unreachable Kafka: %v", err)
	}
}
