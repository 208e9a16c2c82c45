package partitioned

import (
	"context"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
)

// reapKeys retires the given idle partitions, one at a time, and reports
// each verdict. A partition is reaped in every category or reported kept.
func (p *Subscription) reapKeys(ctx context.Context, keys []string) {
	defer p.wg.Done()
	for i, key := range keys {
		all := true
		for _, cat := range p.cfg.Categories {
			res, err := p.cfg.Broker.ReapPartition(ctx, cat, key, p.cfg.ReapAfter, p.cfg.BackfillSuffix)
			if err != nil {
				if ctx.Err() == nil {
					observe.Error(p.obs, runtime.ErrorEvent{Subscription: p.cfg.Name, Op: "reap", Err: err})
				}
				all = false
				break
			}
			if !res.Reaped {
				all = false
				p.log.Debug("partition kept", "subscription", p.cfg.Name, "category", cat, "key", key, "reason", res.Reason)
				break
			}
		}
		if all {
			p.log.Info("partition reaped", "subscription", p.cfg.Name, "key", key)
		}
		if !p.send(evReaped{key: key, reaped: all, last: i == len(keys)-1}) {
			return
		}
	}
}
