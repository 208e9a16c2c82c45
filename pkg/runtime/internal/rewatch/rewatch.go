// Package rewatch keeps a hint watch established for the runtime's
// readers (wake-ups, operator requests, seeks, pauses). A watch's channel
// closes when a hint may have been lost (decision 0053); the reader then
// watches again and re-reads what the hints stand for. Run does that in
// one place: it tells the reader each time the watch is established,
// hands it the channel, and asks for the next watch, after a back-off when
// the last one failed or ended within Settled of its start (a connection
// dropped at once, a reader that keeps falling behind): each attempt
// costs the server a connection and the reader a re-read.
package rewatch

import (
	"context"
	"time"

	"github.com/protctl/protctl/pkg/runtime/clock"
	"github.com/protctl/protctl/pkg/runtime/internal/backoff"
)

// Settled is how long a watch must have lasted for the next one to be
// asked for at once when it ends.
const Settled = time.Second

// Loop is one reader's watch.
type Loop[T any] struct {
	Clock   clock.Clock
	Backoff *backoff.Backoff
	// Watch establishes the watch; its channel closes when ctx ends or a
	// hint may have been lost.
	Watch func(ctx context.Context) (<-chan T, error)
	// Established is called each time Watch succeeded, before Follow:
	// the reader re-reads there (or asks for a re-read). May be nil.
	Established func()
	// Follow reads the channel until it closes.
	Follow func(ch <-chan T)
	// Failed is told of a failed Watch while ctx is live. May be nil.
	Failed func(error)
}

// Run keeps the watch established until ctx ends.
func (l Loop[T]) Run(ctx context.Context) {
	for ctx.Err() == nil {
		began := l.Clock.Now()
		ch, err := l.Watch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if l.Failed != nil {
				l.Failed(err)
			}
			if !clock.Sleep(ctx, l.Clock, l.Backoff.Next()) {
				return
			}
			continue
		}
		if l.Established != nil {
			l.Established()
		}
		l.Follow(ch)
		if l.Clock.Now().Sub(began) < Settled {
			if !clock.Sleep(ctx, l.Clock, l.Backoff.Next()) {
				return
			}
			continue
		}
		l.Backoff.Reset()
	}
}
