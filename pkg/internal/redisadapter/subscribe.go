package redisadapter

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Watch subscribes to channel (Subscribe) and sends the payload of every
// message on the returned channel (Forward) until ctx ends; then it
// closes the channel and the subscription.
//
// Messages are hints. When the reader falls behind and buffer is full
// they are dropped, so a slow reader never stalls go-redis's reader (and
// with it the subscription's health checks); while go-redis reconnects a
// lost connection they are lost. A failure to subscribe is returned as
// Subscribe returns it, for the caller to Map.
func Watch(ctx context.Context, c redis.UniversalClient, channel string, buffer int) (<-chan string, error) {
	ps, err := Subscribe(ctx, c, channel)
	if err != nil {
		return nil, err
	}
	out := make(chan string, buffer)
	go Forward(ctx, ps, out, buffer)
	return out, nil
}

// Subscribe subscribes c to channel and returns once the server has
// confirmed the subscription, so that nothing published after the return
// is missed. A failure is returned as go-redis reported it (or as an
// unexpected first reply), with the subscription closed.
func Subscribe(ctx context.Context, c redis.UniversalClient, channel string) (*redis.PubSub, error) {
	ps := c.Subscribe(ctx, channel)
	msg, err := ps.Receive(ctx)
	if err != nil {
		_ = ps.Close()
		return nil, err
	}
	if _, ok := msg.(*redis.Subscription); !ok {
		_ = ps.Close()
		return nil, fmt.Errorf("unexpected first reply %T", msg)
	}
	return ps, nil
}

// Forward copies the payloads of ps's messages to out, dropping those out
// has no room for, until ctx ends or ps closes; then it closes ps and
// out. Run it in a goroutine of its own on a confirmed subscription.
func Forward(ctx context.Context, ps *redis.PubSub, out chan<- string, size int) {
	defer close(out)
	msgs := ps.Channel(redis.WithChannelSize(size))
	for {
		select {
		case <-ctx.Done():
			// go-redis's reader may be blocked handing us a message (it
			// waits up to a minute on a full channel before it checks
			// for Close): drain until it sees the close and closes msgs,
			// so that no reader goroutine outlives the subscription.
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
