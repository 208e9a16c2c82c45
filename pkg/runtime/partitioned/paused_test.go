package partitioned_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
)

// 16 x Workers partitions paused by a systemic failure of their own keep
// their places on the live path (waitOut gives the slot back, not the
// place): a healthy partition then never gets to acquire its lease.
func TestMemPausedPartitionsDoNotStarveTheLivePath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newMemEnv(t)
		ctx := context.Background()
		var good atomic.Int32
		h := runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
			if strings.HasPrefix(m.Key, "bad") {
				return runtime.Systemic(errors.New("downstream of bad keys is down"))
			}
			good.Add(1)
			return nil
		})
		for i := range 16 {
			if _, err := e.pub.Publish(ctx, cat, fmt.Sprintf("bad%02d", i), envelope("b", 1)); err != nil {
				t.Fatal(err)
			}
		}
		e.start("node-1", h, func(c *partitioned.Config) { c.Workers = 1 }, nil)
		time.Sleep(2 * time.Second)
		if _, err := e.pub.Publish(ctx, cat, "good", envelope("good", 1)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(60 * time.Second)
		synctest.Wait()
		n := good.Load()
		stopCtx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		for _, nd := range e.nodes {
			_ = nd.Stop(stopCtx)
		}
		if n == 0 {
			t.Errorf("the healthy key was not handled in 60s while 16 keys were paused (Workers 1)")
		}
	})
}
