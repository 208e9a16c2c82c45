// Package backoff is the engines' retry wait: full jitter above a floor,
// drawn from a random source seeded per node and per subscription, so that
// nodes that failed together retry apart.
package backoff

import (
	crand "crypto/rand"
	"encoding/binary"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"time"
)

// Seeder is an optional capability of a runtime.Host: the seed of the
// random source a subscription draws its retry and backoff waits from.
// The Node's host implements it (NodeConfig.JitterSeed). A host without
// it gets a seed from crypto/rand, so two nodes never draw the same waits
// by default.
type Seeder interface {
	JitterSeed() uint64
}

// Jitter is one subscription's random source for backoff waits: seeded
// per node (and per subscription, so the subscriptions of one node do not
// move together either), never the process-wide math/rand state. Safe for
// concurrent use; nil draws no jitter (the ceiling itself).
type Jitter struct {
	mu sync.Mutex
	r  *rand.Rand
}

// NewJitter seeds a source from the host's seed (when it is a Seeder) and
// the subscription's name.
func NewJitter(host any, name string) *Jitter {
	var seed uint64
	if s, ok := host.(Seeder); ok {
		seed = s.JitterSeed()
	} else {
		seed = RandomSeed()
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	return &Jitter{r: rand.New(rand.NewPCG(seed, h.Sum64()))}
}

// RandomSeed draws a seed from crypto/rand (which does not fail on the
// platforms Go supports; on failure the time is used).
func RandomSeed() uint64 {
	var b [8]byte
	if _, err := crand.Read(b[:]); err != nil {
		return uint64(time.Now().UnixNano())
	}
	return binary.LittleEndian.Uint64(b[:])
}

// Between returns a uniform duration in [lo, hi]; hi when j is nil.
func (j *Jitter) Between(lo, hi time.Duration) time.Duration {
	if j == nil || hi <= lo {
		return hi
	}
	j.mu.Lock()
	d := lo + time.Duration(j.r.Int64N(int64(hi-lo)+1))
	j.mu.Unlock()
	return d
}

// Backoff is a retry wait with full jitter above a floor: the ceiling
// starts at twice min and doubles up to max, and each wait is drawn
// uniformly from [min, ceiling], so every wait lies in [min, max] and
// nodes that failed together (a Redis outage, a broker restart) retry at
// scattered instants instead of in lockstep. Not safe for concurrent use
// (one per loop); its source is.
type Backoff struct {
	min, max, ceil time.Duration
	j              *Jitter
}

// New returns a backoff between min and max drawing from j (nil: no
// jitter, every wait is the ceiling).
func New(min, max time.Duration, j *Jitter) *Backoff {
	if max < min {
		max = min
	}
	return &Backoff{min: min, max: max, j: j}
}

// Next returns the next wait and doubles the ceiling.
func (b *Backoff) Next() time.Duration {
	if b.ceil == 0 {
		b.ceil = min(2*b.min, b.max)
	} else {
		b.ceil = min(2*b.ceil, b.max)
	}
	return b.j.Between(b.min, b.ceil)
}

// Reset starts the ceiling again from twice min (after a success).
func (b *Backoff) Reset() { b.ceil = 0 }
