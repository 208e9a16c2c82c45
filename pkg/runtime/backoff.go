package runtime

import (
	crand "crypto/rand"
	"encoding/binary"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"time"
)

// JitterSeeder is an optional Host capability: the seed of the random
// source a subscription draws its retry and backoff waits from. Node
// implements it (NodeConfig.JitterSeed). A host without it gets a seed
// from crypto/rand, so two nodes never draw the same waits by default.
type JitterSeeder interface {
	JitterSeed() uint64
}

// jitter is one subscription's random source for backoff waits: seeded
// per node (and per subscription, so the subscriptions of one node do not
// move together either), never the process-wide math/rand state. Safe for
// concurrent use; nil draws no jitter (the ceiling itself).
type jitter struct {
	mu sync.Mutex
	r  *rand.Rand
}

// newJitter seeds a source from the host's seed and the subscription's
// name.
func newJitter(host Host, name string) *jitter {
	var seed uint64
	if s, ok := host.(JitterSeeder); ok {
		seed = s.JitterSeed()
	} else {
		seed = randomSeed()
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	return &jitter{r: rand.New(rand.NewPCG(seed, h.Sum64()))}
}

// randomSeed draws a seed from crypto/rand (which does not fail on the
// platforms Go supports; on failure the time is used).
func randomSeed() uint64 {
	var b [8]byte
	if _, err := crand.Read(b[:]); err != nil {
		return uint64(time.Now().UnixNano())
	}
	return binary.LittleEndian.Uint64(b[:])
}

// between returns a uniform duration in [lo, hi]; hi when j is nil.
func (j *jitter) between(lo, hi time.Duration) time.Duration {
	if j == nil || hi <= lo {
		return hi
	}
	j.mu.Lock()
	d := lo + time.Duration(j.r.Int64N(int64(hi-lo)+1))
	j.mu.Unlock()
	return d
}

// backoff is a retry wait with full jitter above a floor: the ceiling
// starts at twice min and doubles up to max, and each wait is drawn
// uniformly from [min, ceiling], so every wait lies in [min, max] and
// nodes that failed together (a Redis outage, a broker restart) retry at
// scattered instants instead of in lockstep. Not safe for concurrent use
// (one per loop); its source is.
type backoff struct {
	min, max, ceil time.Duration
	j              *jitter
}

func newBackoff(min, max time.Duration, j *jitter) *backoff {
	if max < min {
		max = min
	}
	return &backoff{min: min, max: max, j: j}
}

func (b *backoff) next() time.Duration {
	if b.ceil == 0 {
		b.ceil = min(2*b.min, b.max)
	} else {
		b.ceil = min(2*b.ceil, b.max)
	}
	return b.j.between(b.min, b.ceil)
}

func (b *backoff) reset() { b.ceil = 0 }
