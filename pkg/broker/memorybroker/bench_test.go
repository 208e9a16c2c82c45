package memorybroker_test

import (
	"context"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
)

// BenchmarkFencedConsume measures one message of the owner's loop (a
// batch of 100 read with ReadPendingThenNew, then acked in one call) on a
// partition far behind its publisher. ns/op is per message.
func BenchmarkFencedConsume(b *testing.B) {
	ctx := context.Background()
	br := memorybroker.New(memorybroker.WithClock(memorybroker.NewManualClock(epoch)))
	l := br.Layout()
	payload := []byte(`{"data":{"n":1},"metadata":{"headers":{"type":"Test"}}}`)
	for range b.N {
		if _, err := br.PublishPartitioned(ctx, cat, key, "", payload); err != nil {
			b.Fatal(err)
		}
	}
	lease, _, err := br.AcquirePartitionLease(ctx, l.LeaseKey(group, key), l.GenerationKey(group, key), owner, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	stream := l.Stream(cat, key)
	ids := make([]string, 0, 100)
	b.ResetTimer()
	for done := 0; done < b.N; {
		msgs, err := br.ReadPartitionFenced(ctx, lease.Fence, stream, group, 100, broker.ReadPendingThenNew)
		if err != nil {
			b.Fatal(err)
		}
		ids = ids[:0]
		for _, m := range msgs {
			ids = append(ids, m.ID)
		}
		if _, err := br.AckPartitionFenced(ctx, lease.Fence, stream, group, ids...); err != nil {
			b.Fatal(err)
		}
		done += len(msgs)
	}
}

// BenchmarkPublish measures PublishPartitioned over 1000 keys.
func BenchmarkPublish(b *testing.B) {
	ctx := context.Background()
	br := memorybroker.New()
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "k" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
	}
	payload := []byte(`{"data":{"n":1}}`)
	b.ResetTimer()
	for i := range b.N {
		if _, err := br.PublishPartitioned(ctx, cat, keys[i%len(keys)], "", payload); err != nil {
			b.Fatal(err)
		}
	}
}
