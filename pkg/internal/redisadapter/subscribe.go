package redisadapter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// Watch subscribes to channel (Subscribe) and sends the payload of every
// message on the returned channel (Forward) until ctx ends or a message
// may have been missed; then it closes the channel and the subscription.
//
// Messages are hints, and a closed channel is the one sign that one was
// lost: the connection failed (go-redis would re-establish it silently,
// losing what was published meanwhile), or the reader fell behind and
// buffer filled. The caller watches again and re-reads what the hints
// stand for, so that nothing waits for its next periodic read. A failure
// to subscribe is returned as Subscribe returns it, for the caller to
// Map.
func Watch(ctx context.Context, c redis.UniversalClient, channel string, buffer int) (<-chan string, error) {
	ps, err := Subscribe(ctx, c, channel)
	if err != nil {
		return nil, err
	}
	out := make(chan string, buffer)
	go Forward(ctx, ps, out)
	return out, nil
}

// WatchChanges is Watch for a channel whose messages say only that
// something changed: the returned channel holds one pending signal, and a
// message that finds one pending is merged into it, not lost, so only a
// lost connection closes the channel.
func WatchChanges(ctx context.Context, c redis.UniversalClient, channel string) (<-chan struct{}, error) {
	ps, err := Subscribe(ctx, c, channel)
	if err != nil {
		return nil, err
	}
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		Follow(ctx, ps, QuietPing, func(*redis.Message) bool {
			select {
			case out <- struct{}{}:
			default: // one pending signal says it all
			}
			return true
		})
	}()
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

// Forward copies the payloads of ps's messages to out (Follow) until ctx
// ends, a message may have been missed, or out has no room for one; then
// it closes ps and out. Ending rather than dropping tells the reader that
// it missed a hint. Run it in a goroutine of its own on a confirmed
// subscription.
func Forward(ctx context.Context, ps *redis.PubSub, out chan<- string) {
	defer close(out)
	Follow(ctx, ps, QuietPing, func(m *redis.Message) bool {
		select {
		case out <- m.Payload:
			return true
		default:
			return false
		}
	})
}

// QuietPing is how long a followed subscription may be quiet before
// Follow pings its connection, and how long the pong may take.
const QuietPing = 15 * time.Second

// Follow calls fn with each message of ps, a confirmed subscription, until
// ctx ends, fn returns false, or a message may have been missed; then it
// closes ps. A message may have been missed when the connection failed,
// when the subscription is confirmed again (go-redis re-established a
// lost connection, and what was published meanwhile is lost), or when
// the connection stayed quiet for quiet and then did not answer a ping
// within quiet more (a half-open connection), or when a reply comes that
// nobody asked for (a read cut in two by the quiet timeout leaves the
// replies out of step).
//
// Follow reads the replies itself rather than through ps.Channel, whose
// reader re-establishes a lost connection without telling anyone.
func Follow(ctx context.Context, ps *redis.PubSub, quiet time.Duration, fn func(*redis.Message) bool) {
	defer ps.Close()
	// ReceiveTimeout does not watch ctx: closing the subscription ends a
	// read in progress.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	pinged := false
	pings := 0 // sent and not answered yet
	for {
		msg, err := ps.ReceiveTimeout(ctx, quiet)
		if err != nil {
			var ne net.Error
			if ctx.Err() == nil && errors.As(err, &ne) && ne.Timeout() && !pinged {
				// Quiet: a ping proves the connection (its pong is the
				// next reply); quiet again after it ends the watch.
				if ps.Ping(ctx) != nil {
					return
				}
				pinged = true
				pings++
				continue
			}
			return
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Message:
			if !fn(m) {
				return
			}
		case *redis.Pong:
			// A pong nobody asked for is a message read out of step (a
			// timeout that cut a reply in two): it may have been lost.
			if pings == 0 {
				return
			}
			pings--
		case *redis.Subscription:
			// Subscribe consumed the first confirmation: this one
			// follows a reconnection.
			return
		default:
			return // a reply this loop does not know: out of step too
		}
	}
}
