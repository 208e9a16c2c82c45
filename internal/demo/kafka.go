package demo

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

// TopicPartitions is the partition count of the embedded Kafka's topic.
const TopicPartitions = 6

// EmbeddedKafka starts an in-process Kafka (kfake: the real protocol on a
// loopback port) with the demo's topic, and returns its brokers and the
// function that stops it.
func EmbeddedKafka() (brokers []string, stop func(), err error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(TopicPartitions, Topic))
	if err != nil {
		return nil, nil, fmt.Errorf("demo: start the embedded Kafka: %w", err)
	}
	return c.ListenAddrs(), c.Close, nil
}

// kafkaSide is the demo's Kafka half: a producer of the same events
// (keyed by order, so an order's events share a partition) and a topic
// subscription on every node.
type kafkaSide struct {
	brokers []string
	src     *kafkasource.Source
	prod    *kgo.Client
	log     *slog.Logger
}

func newKafkaSide(brokers []string, log *slog.Logger) (*kafkaSide, error) {
	src, err := kafkasource.New(brokers, kafkasource.WithLogger(log), kafkasource.WithClientID("protctl-demo"))
	if err != nil {
		return nil, err
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(Topic), kgo.ProducerLinger(5*time.Millisecond), kgo.ClientID("protctl-demo-publisher"))
	if err != nil {
		src.Close()
		return nil, err
	}
	return &kafkaSide{brokers: brokers, src: src, prod: prod, log: log}, nil
}

func (k *kafkaSide) subscriptions(d *Demo, node string) (*topic.Consumer, error) {
	return topic.New(topic.Config{
		Topic: Topic,
		Subscriptions: []topic.Subscription{{
			Name:    TopicSubscription,
			Handler: d.handler(d.topic, node),
			Retry:   runtime.RetryPolicy{Attempts: 3, Backoff: 50 * time.Millisecond},
		}},
		Source:          topic.Kafka(k.src),
		Leases:          d.brk,
		Checkpoints:     d.checkpoint,
		Ledger:          d.ledger,
		LeaseTTL:        d.cfg.LeaseTTL,
		RenewEvery:      d.cfg.RenewEvery,
		CheckpointEvery: 500 * time.Millisecond,
	})
}

// produce sends one event, asynchronously; a failure is logged.
func (k *kafkaSide) produce(ctx context.Context, key string, value []byte) {
	k.prod.Produce(ctx, &kgo.Record{Key: []byte(key), Value: value}, func(_ *kgo.Record, err error) {
		if err != nil && ctx.Err() == nil {
			k.log.Warn("demo: kafka produce failed", "err", err)
		}
	})
}

func (k *kafkaSide) close() {
	k.prod.Close()
	k.src.Close()
}
