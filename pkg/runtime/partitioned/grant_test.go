package partitioned_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
)

// grantErrBroker reports a grant whose reply could not be decoded after
// the step ran (what redisbroker's parseGrant does on a reply of the wrong
// shape): Acquired, with Err, no tails and no read.
type grantErrBroker struct {
	*memorybroker.Broker
	once sync.Once
}

func (b *grantErrBroker) AcquirePartitionLeases(ctx context.Context, reqs []broker.LeaseRequest) []broker.LeaseGrant {
	out := b.Broker.AcquirePartitionLeases(ctx, reqs)
	for i := range out {
		if out[i].Acquired && out[i].Read != nil {
			b.once.Do(func() {
				out[i] = broker.LeaseGrant{Lease: out[i].Lease, Acquired: true, Err: errors.New("unexpected reply")}
			})
		}
	}
	return out
}

func TestMemGrantErrorDoesNotStrandTheAcquisitionsRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newMemEnv(t)
		ctx := context.Background()
		var mu sync.Mutex
		var got []int
		h := runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
			mu.Lock()
			got = append(got, seqOf(t, m.Data))
			mu.Unlock()
			return nil
		})
		for i := 1; i <= 2; i++ {
			if _, err := e.pub.Publish(ctx, cat, "k", envelope("k", i)); err != nil {
				t.Fatal(err)
			}
		}
		gb := &grantErrBroker{Broker: e.b}
		e.start("node-1", h, func(c *partitioned.Config) { c.Broker = gb; c.IdleAfter = 50 * time.Millisecond }, nil)
		time.Sleep(time.Second)
		// More entries, several idle releases and fresh acquisitions later.
		for i := 3; i <= 4; i++ {
			if _, err := e.pub.Publish(ctx, cat, "k", envelope("k", i)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		e.stopAll()
		pend, _ := e.b.PendingEntries(ctx, broker.ProteanLayout.Stream(cat, "k"), group, 10)
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 4 {
			t.Errorf("handled %v, want 1..4; pending %+v", got, pend)
		}
	})
}
