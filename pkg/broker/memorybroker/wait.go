package memorybroker

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// entryWaiter is one blocked WaitForEntries call. Appends to any of its
// streams signal ready (buffered, so a signal between two checks is kept).
type entryWaiter struct {
	ready chan struct{}
}

// WaitForEntries blocks until at least one stream of after has an entry
// with an id greater than the id after maps it to (a missing stream counts
// as empty), or timeout passes (0 waits until ctx ends), like XREAD BLOCK.
// It returns those streams in lexical order, nil on timeout, and reads
// nothing on behalf of any group. The timeout is wall time (it bounds a
// blocking call), not the broker's Clock. A key of another type is
// refused with a *broker.WrongTypeError. It works on inline brokers too.
func (b *Broker) WaitForEntries(ctx context.Context, after map[string]string, timeout time.Duration) ([]string, error) {
	const op = "wait for entries"
	if err := ctxErr(ctx, op); err != nil {
		return nil, err
	}
	if len(after) == 0 {
		return nil, invalid(op, "after", "{}", "must name at least one stream")
	}
	if timeout < 0 {
		return nil, invalid(op, "timeout", timeout.String(), "must not be negative")
	}
	since := make(map[string]broker.StreamID, len(after))
	for stream, id := range after {
		if err := nonEmpty(op, "stream", stream); err != nil {
			return nil, err
		}
		sid, err := broker.ParseStreamID(id)
		if err != nil {
			return nil, invalid(op, "id", strconv.Quote(id), `want "<ms>-<seq>"`)
		}
		since[stream] = sid
	}

	w := &entryWaiter{ready: make(chan struct{}, 1)}
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	registered := false
	defer func() {
		if registered {
			b.mu.Lock()
			b.unregisterWaiter(since, w)
			b.mu.Unlock()
		}
	}()
	for {
		now := b.lock()
		ready, err := b.streamsAfter(op, since, now)
		if err == nil && ready == nil && !registered {
			// Register before unlocking: an append after this check
			// signals w, so none is missed between check and wait.
			b.registerWaiter(since, w)
			registered = true
		}
		b.mu.Unlock()
		if err != nil || ready != nil {
			return ready, err
		}
		select {
		case <-w.ready:
		case <-expired:
			return nil, nil
		case <-ctx.Done():
			return nil, ctxErr(ctx, op)
		}
	}
}

// streamsAfter returns the streams of since whose newest entry is after
// the given id; nil when there are none.
func (b *Broker) streamsAfter(op string, since map[string]broker.StreamID, now time.Time) ([]string, error) {
	var ready []string
	for stream, id := range since {
		s, err := b.streamAt(op, stream, now)
		if err != nil {
			return nil, err
		}
		if s == nil {
			continue
		}
		if newest, ok := s.newest(); ok && id.Less(newest) {
			ready = append(ready, stream)
		}
	}
	slices.Sort(ready)
	return ready, nil
}

func (b *Broker) registerWaiter(since map[string]broker.StreamID, w *entryWaiter) {
	for stream := range since {
		ws := b.entryWaiters[stream]
		if ws == nil {
			ws = make(map[*entryWaiter]struct{})
			b.entryWaiters[stream] = ws
		}
		ws[w] = struct{}{}
	}
}

func (b *Broker) unregisterWaiter(since map[string]broker.StreamID, w *entryWaiter) {
	for stream := range since {
		delete(b.entryWaiters[stream], w)
		if len(b.entryWaiters[stream]) == 0 {
			delete(b.entryWaiters, stream)
		}
	}
}

// appended signals the waiters of stream; called with mu held after every
// append.
func (b *Broker) appended(stream string) {
	for w := range b.entryWaiters[stream] {
		select {
		case w.ready <- struct{}{}:
		default:
		}
	}
}
