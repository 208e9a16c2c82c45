package redisbroker

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// WatchPartitions subscribes to category's wake channel and sends the key
// of every partition PublishPartitioned appends to, until ctx ends; then
// it closes the channel and the subscription.
//
// The subscription is confirmed by the server before WatchPartitions
// returns, so no publish that starts after the return is missed. Signals
// are hints: when the caller falls behind and the buffer (WithWatchBuffer)
// is full they are dropped, and while go-redis reconnects a lost
// connection they are lost; consumers still read fenced to learn what is
// there, and should read each owned partition once after a reconnect.
func (b *Broker) WatchPartitions(ctx context.Context, category string) (<-chan string, error) {
	const op = "watch partitions"
	if err := b.validCategory(op, category); err != nil {
		return nil, err
	}
	channel := b.cfg.layout.WakeChannel(category)
	ps := b.client.Subscribe(ctx, channel)
	msg, err := ps.Receive(ctx)
	if err != nil {
		_ = ps.Close()
		return nil, mapErr(call{op: op}, err)
	}
	if _, ok := msg.(*redis.Subscription); !ok {
		_ = ps.Close()
		return nil, fmt.Errorf("redisbroker: %s: unexpected first reply %T", op, msg)
	}
	out := make(chan string, b.cfg.watchBuffer)
	go forwardWakeups(ctx, ps, out, b.cfg.watchBuffer)
	return out, nil
}

// forwardWakeups copies payloads from the subscription to out without
// ever blocking on out, so a slow watcher cannot stall go-redis's reader
// (and with it the health checks of the subscription).
func forwardWakeups(ctx context.Context, ps *redis.PubSub, out chan<- string, size int) {
	defer close(out)
	msgs := ps.Channel(redis.WithChannelSize(size))
	for {
		select {
		case <-ctx.Done():
			// go-redis's reader may be blocked handing us a message (it
			// waits up to a minute on a full channel before it checks
			// for Close): drain until it sees the close and closes msgs.
			_ = ps.Close()
			for range msgs {
			}
			return
		case m, ok := <-msgs:
			if !ok {
				_ = ps.Close()
				return
			}
			select {
			case out <- m.Payload:
			default:
			}
		}
	}
}
