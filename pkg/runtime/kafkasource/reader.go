package kafkasource

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Offsets to start a partition at, besides an exact offset.
const (
	// FromEarliest starts at the earliest retained offset.
	FromEarliest int64 = -2
	// FromHead starts at the head: only records produced from now on.
	FromHead int64 = -1
)

// Batch is what one Poll returned for one partition.
type Batch struct {
	Partition int32
	// Epoch is what the Assign call that started this run of the partition
	// returned. A Poll running while Assign moves a partition can return
	// records of the old run after Assign has returned; a caller that
	// assigns from another goroutine drops batches whose Epoch is not the
	// one its latest Assign of the partition returned.
	Epoch uint64
	// Records in offset order, all of this partition.
	Records []*kgo.Record
	// Head is the partition's head as of this fetch (for lag).
	Head int64
	// Err is an error of this partition. An *OffsetError (errors.Is
	// ErrOffsetNotRetained or ErrOffsetBeyondHead) means the Reader's
	// position could not be read: the assigned start offset, or the
	// position it had reached when retention or DeleteRecords removed the
	// records there before it read them. Nothing is skipped silently: the
	// partition is unassigned, and the caller records the loss and assigns
	// it again where it decides (usually the error's Earliest). Other
	// errors are reported while reading goes on.
	Err error
}

// Reader tails a set of partitions of one topic, assigned by hand: it
// reads each assigned partition from the offset it was given, in order,
// with no consumer group and no commit. One Reader serves one (node,
// topic): the runtime assigns the partitions it holds leases for and
// unassigns them on handoff.
//
// Poll must be called from one goroutine at a time; Assign, Unassign,
// Pause, Resume, Assigned and Close may be called from any goroutine,
// also while a Poll is blocked. A Poll that overlaps an assignment change
// may return records of the old assignment after the change returned:
// Batch.Epoch tells them apart.
type Reader struct {
	src   *Source
	topic string
	cl    *kgo.Client

	// pollMu is held by Poll from the fetch until its records are
	// accounted for, and by every assignment change. So a change never
	// lands between kgo handing records over and the Reader stamping them
	// with their partition's epoch and position: without it, records kgo
	// fetched at a partition's old position could be stamped with the
	// epoch of its new one, and the caller could not tell them apart.
	pollMu sync.Mutex

	stateMu sync.Mutex
	parts   map[int32]*partState // under stateMu; changed only under pollMu too
	epoch   uint64               // of the latest Assign, under pollMu

	// changing counts assignment changes waiting for pollMu; a Poll that
	// sees one returns at once instead of blocking them.
	changing   atomic.Int32
	cancelMu   sync.Mutex
	cancelPoll context.CancelFunc // the blocked Poll's, under cancelMu

	closeOnce sync.Once
	closed    atomic.Bool
}

type partState struct {
	next  int64  // offset after the last record returned; < 0 until known
	epoch uint64 // of the Assign that started this run
}

// NewReader returns a Reader of topic with nothing assigned. It does no
// I/O. The Reader has its own connections (franz-go keeps one consumer
// position per client); close it with Close.
func (s *Source) NewReader(topic string) (*Reader, error) {
	if err := s.checkArgs(topic); err != nil {
		return nil, err
	}
	// The reader's own settings go before the shared ones, which end with
	// WithKgoOptions' (so those still win, and are given once: kgo adds
	// up hooks given twice).
	opts := append([]kgo.Opt{
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		kgo.FetchMaxWait(s.cfg.fetchMaxWait),
		kgo.FetchMaxPartitionBytes(s.cfg.fetchPartBytes),
	}, s.cfg.kgoOpts(s.brokers, s.conns)...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	return &Reader{src: s, topic: topic, cl: cl, parts: make(map[int32]*partState)}, nil
}

// Topic is the topic the Reader reads.
func (r *Reader) Topic() string { return r.topic }

// Assign starts reading the given partitions, each at its offset (an
// exact offset, FromEarliest or FromHead). A partition already assigned
// restarts at the new offset; a paused one is resumed. Negative partition
// numbers and offsets below FromEarliest are ignored. It returns the
// epoch that batches of this run carry (see Batch.Epoch); 0 when nothing
// was assigned.
func (r *Reader) Assign(offsets map[int32]int64) uint64 {
	if r.closed.Load() || len(offsets) == 0 {
		return 0
	}
	r.lockForChange()
	defer r.pollMu.Unlock()
	r.epoch++
	epoch := r.epoch

	var restart []int32
	add := make(map[int32]kgo.Offset, len(offsets))
	r.stateMu.Lock()
	for p, off := range offsets {
		if p < 0 || off < FromEarliest {
			continue
		}
		if _, ok := r.parts[p]; ok {
			restart = append(restart, p)
		}
		switch off {
		case FromEarliest:
			add[p] = kgo.NewOffset().AtStart()
		case FromHead:
			add[p] = kgo.NewOffset().AtEnd()
		default:
			add[p] = kgo.NewOffset().At(off)
		}
		r.parts[p] = &partState{next: off, epoch: epoch}
	}
	r.stateMu.Unlock()
	if len(add) == 0 {
		return 0
	}
	if len(restart) > 0 {
		r.cl.RemoveConsumePartitions(map[string][]int32{r.topic: restart})
	}
	ps := make([]int32, 0, len(add))
	for p := range add {
		ps = append(ps, p)
	}
	r.cl.ResumeFetchPartitions(map[string][]int32{r.topic: ps})
	r.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{r.topic: add})
	return epoch
}

// Unassign stops reading the given partitions and drops what was fetched
// for them but not yet returned by Poll. Partitions not assigned are
// ignored.
func (r *Reader) Unassign(partitions ...int32) {
	if r.closed.Load() || len(partitions) == 0 {
		return
	}
	r.lockForChange()
	defer r.pollMu.Unlock()
	r.unassignLocked(partitions)
}

func (r *Reader) unassignLocked(partitions []int32) {
	var drop []int32
	r.stateMu.Lock()
	for _, p := range partitions {
		if _, ok := r.parts[p]; ok {
			drop = append(drop, p)
			delete(r.parts, p)
		}
	}
	r.stateMu.Unlock()
	if len(drop) == 0 {
		return
	}
	r.cl.RemoveConsumePartitions(map[string][]int32{r.topic: drop})
	r.cl.ResumeFetchPartitions(map[string][]int32{r.topic: drop})
}

// Assigned returns the assigned partitions, each with the offset the next
// record Poll returns will have at least: the offset after the last record
// returned, or the assigned start (negative for FromEarliest/FromHead
// until a record arrives).
func (r *Reader) Assigned() map[int32]int64 {
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	out := make(map[int32]int64, len(r.parts))
	for p, st := range r.parts {
		out[p] = st.next
	}
	return out
}

// Pause stops fetching the given partitions (backpressure) without losing
// their position: records buffered for them are kept back, not skipped.
func (r *Reader) Pause(partitions ...int32) {
	if len(partitions) > 0 && !r.closed.Load() {
		r.cl.PauseFetchPartitions(map[string][]int32{r.topic: partitions})
	}
}

// Resume undoes Pause. Fetching restarts within WithFetchMaxWait.
func (r *Reader) Resume(partitions ...int32) {
	if len(partitions) > 0 && !r.closed.Load() {
		r.cl.ResumeFetchPartitions(map[string][]int32{r.topic: partitions})
	}
}

// Paused returns the paused partitions, ascending.
func (r *Reader) Paused() []int32 {
	out := slices.Clone(r.cl.PauseFetchPartitions(nil)[r.topic])
	slices.Sort(out)
	return out
}

// Poll waits for records of the assigned partitions and returns them,
// one Batch per partition that has records or an error. It returns
// (nil, ctx.Err()) when ctx ends first, ErrClosed once the Reader is
// closed, and (nil, nil) when an assignment change interrupted the wait:
// callers poll in a loop.
//
// Poll does not report a broker outage: it keeps waiting (and franz-go
// keeps reconnecting). Watch the cluster's health with Source.Reachable,
// which the Reader's own failing fetches and reconnections turn, or with
// the Source's calls, which fail with ErrUnreachable.
func (r *Reader) Poll(ctx context.Context) ([]Batch, error) {
	if r.closed.Load() {
		return nil, ErrClosed
	}
	r.pollMu.Lock()
	defer r.pollMu.Unlock()

	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.cancelMu.Lock()
	r.cancelPoll = cancel
	r.cancelMu.Unlock()
	defer func() {
		r.cancelMu.Lock()
		r.cancelPoll = nil
		r.cancelMu.Unlock()
	}()
	// Checked after publishing cancel: a change that began before sees no
	// cancel to call, so it must be seen here (see lockForChange).
	if r.changing.Load() > 0 {
		return nil, nil
	}

	fetches := r.cl.PollFetches(pctx)
	if fetches.IsClientClosed() || r.closed.Load() {
		return nil, ErrClosed
	}
	var out []Batch
	fetches.EachTopic(func(ft kgo.FetchTopic) {
		if ft.Topic != r.topic {
			return
		}
		for i := range ft.Partitions {
			if b, ok := r.account(ctx, &ft.Partitions[i]); ok {
				out = append(out, b)
			}
		}
	})
	if len(out) == 0 {
		// Records are never dropped for a context: kgo hands records over
		// or the context's error, not both. Here there were none.
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// account checks one partition's fetch against the assignment, updates
// its position and turns errors into the package's. Under pollMu, so the
// assignment cannot change while it runs.
func (r *Reader) account(ctx context.Context, fp *kgo.FetchPartition) (Batch, bool) {
	r.stateMu.Lock()
	st, ok := r.parts[fp.Partition]
	var next int64
	var epoch uint64
	if ok {
		next, epoch = st.next, st.epoch
	}
	r.stateMu.Unlock()
	if !ok {
		return Batch{}, false // unassigned meanwhile
	}
	b := Batch{Partition: fp.Partition, Epoch: epoch, Records: fp.Records, Head: fp.HighWatermark}
	if n := len(fp.Records); n > 0 {
		next = fp.Records[n-1].Offset + 1
		r.stateMu.Lock()
		st.next = next
		r.stateMu.Unlock()
	}
	if fp.Err != nil {
		b.Err = r.partitionErr(ctx, fp.Partition, next, fp.Err)
	}
	return b, len(b.Records) > 0 || b.Err != nil
}

func (r *Reader) partitionErr(ctx context.Context, p int32, off int64, err error) error {
	if !errors.Is(err, kerr.OffsetOutOfRange) {
		return fmt.Errorf("kafkasource: read %s/%d: %w", r.topic, p, err)
	}
	// franz-go stops a partition whose position is out of range, at the
	// start or later (we asked it to: NoResetOffset, where its default
	// would jump to another offset and skip records unannounced). Say on
	// which side, and unassign it so the caller reassigns it knowingly.
	r.unassignLocked([]int32{p})
	wm, werr := r.src.PartitionWatermarks(ctx, r.topic, p)
	if werr != nil {
		return fmt.Errorf("kafkasource: read %s/%d at offset %d: %w (and reading its watermarks failed: %v)", r.topic, p, off, err, werr)
	}
	if oerr := offsetCheck(r.topic, p, off, wm); oerr != nil {
		return oerr
	}
	// Back in range by now (e.g. records were produced up to it).
	return fmt.Errorf("kafkasource: read %s/%d at offset %d: %w", r.topic, p, off, err)
}

// lockForChange takes pollMu for an assignment change, interrupting a
// Poll that is blocked waiting for records. The counter is raised before
// the cancel is read, and Poll publishes its cancel before reading the
// counter, so either this sees the Poll's cancel or the Poll sees the
// counter and returns at once; a change never waits out a long poll.
func (r *Reader) lockForChange() {
	r.changing.Add(1)
	r.cancelMu.Lock()
	if r.cancelPoll != nil {
		r.cancelPoll()
	}
	r.cancelMu.Unlock()
	r.pollMu.Lock()
	r.changing.Add(-1)
}

// Close stops the Reader: a blocked Poll returns ErrClosed. Closing twice
// is a no-op.
func (r *Reader) Close() {
	r.closeOnce.Do(func() {
		r.closed.Store(true)
		r.cl.Close()
	})
}
