package redisbroker

import (
	"context"

	"github.com/protctl/protctl/pkg/internal/redisadapter"
)

// WatchPartitions subscribes to category's wake channel and sends the key
// of every partition PublishPartitioned appends to, until ctx ends; then
// it closes the channel and the subscription.
//
// The subscription is confirmed by the server before WatchPartitions
// returns, so no publish that starts after the return is missed. The
// channel also closes when a signal may have been lost: the connection
// failed, or the caller fell behind and the buffer (WithWatchBuffer) was
// full. Consumers then watch again and read each partition they wait on
// once; they read fenced to learn what is there.
func (b *Broker) WatchPartitions(ctx context.Context, category string) (<-chan string, error) {
	const op = "watch partitions"
	if err := b.validCategory(op, category); err != nil {
		return nil, err
	}
	ch, err := redisadapter.Watch(ctx, b.client, b.cfg.layout.WakeChannel(category), b.cfg.watchBuffer)
	if err != nil {
		return nil, mapErr(call{Op: op}, err)
	}
	return ch, nil
}
