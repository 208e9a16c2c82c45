package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kafka is an in-process Kafka (kfake) for tests: real protocol, real
// sockets on loopback, no external process.
type Kafka struct {
	Cluster *kfake.Cluster
	Brokers []string // host:port seeds
}

// StartKafka starts a one-broker kfake cluster with the topics created,
// each with partitions partitions, and closes it at cleanup.
func StartKafka(t testing.TB, partitions int32, topics ...string) *Kafka {
	t.Helper()
	return StartKafkaWith(t, nil, partitions, topics...)
}

// StartKafkaWith is StartKafka with extra kfake options (TLS, SASL users,
// broker configs).
func StartKafkaWith(t testing.TB, opts []kfake.Opt, partitions int32, topics ...string) *Kafka {
	t.Helper()
	all := []kfake.Opt{kfake.NumBrokers(1)}
	if len(topics) > 0 {
		all = append(all, kfake.SeedTopics(partitions, topics...))
	}
	c, err := kfake.NewCluster(append(all, opts...)...)
	if err != nil {
		t.Fatalf("testenv: start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return &Kafka{Cluster: c, Brokers: c.ListenAddrs()}
}

// Client returns a kgo client for the cluster, closed at cleanup. Records
// it produces go to the partition set in Record.Partition (manual
// partitioning), so tests decide where each record lands; later opts win.
func (k *Kafka) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	base := []kgo.Opt{
		kgo.SeedBrokers(k.Brokers...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		t.Fatalf("testenv: kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Produce writes records synchronously (each to its Topic and Partition)
// and fails the test on any error. It returns the records, with their
// offsets set.
func (k *Kafka) Produce(t testing.TB, cl *kgo.Client, records ...*kgo.Record) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := cl.ProduceSync(ctx, records...)
	if err := res.FirstErr(); err != nil {
		t.Fatalf("testenv: produce: %v", err)
	}
	out := make([]*kgo.Record, len(res))
	for i, r := range res {
		out[i] = r.Record
	}
	return out
}

// DeleteRecords deletes a partition's records below offset through the
// Kafka protocol (a DeleteRecords request, as an operator's tool would),
// moving its earliest retained offset to offset.
func (k *Kafka) DeleteRecords(t testing.TB, cl *kgo.Client, topic string, partition int32, offset int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrDeleteRecordsRequest()
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewDeleteRecordsRequestTopicPartition()
	rp.Partition = partition
	rp.Offset = offset
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 10000
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("testenv: delete records: %v", err)
	}
	for _, t2 := range resp.Topics {
		for _, p := range t2.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				t.Fatalf("testenv: delete records %s/%d below %d: %v", topic, p.Partition, offset, err)
			}
		}
	}
}
