package kafkasource

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Head, as the to argument of Scan, means the partition's head when the
// scan starts: records produced during the scan are not included.
const Head int64 = -1

// Watermarks are a partition's bounds: Earliest is the first offset still
// retained (the low watermark), Head the offset the next record will get
// (the high watermark). The partition holds [Earliest, Head); it is empty
// when they are equal.
type Watermarks struct {
	Earliest int64
	Head     int64
}

// Source reads a Kafka cluster's topics partition by partition, with no
// consumer group: it never joins a group and never commits an offset, so
// the runtime's own checkpoints are the only record of progress.
//
// A Source is safe for concurrent use. Its methods that talk to Kafka take
// a context and also give up after the configured retry budget (WithRetry)
// when the context has no deadline.
type Source struct {
	brokers []string
	cfg     config
	cl      *kgo.Client
	conns   *connWatch
	decomp  kgo.Decompressor

	closeOnce sync.Once
	closed    chan struct{}

	// jit draws the retry waits of scans (backoff): a leader election
	// stalls every node's scans at once, and waits drawn per Source keep
	// them from retrying together. Seeded from crypto/rand in New.
	jitMu sync.Mutex
	jit   *rand.Rand
}

// New returns a Source for the cluster reachable at brokers (host:port
// seeds; the rest of the cluster is discovered). It does no I/O: an
// unreachable cluster is reported by the first call that needs it.
func New(brokers []string, opts ...Option) (*Source, error) {
	if len(brokers) == 0 {
		return nil, invalidf("no brokers")
	}
	for _, b := range brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return nil, invalidf("broker %q: %v", b, err)
		}
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Source{
		brokers: slices.Clone(brokers),
		cfg:     cfg,
		conns:   &connWatch{},
		decomp:  kgo.DefaultDecompressor(),
		closed:  make(chan struct{}),
		jit:     rand.New(rand.NewPCG(randomSeed(), 0)),
	}
	cl, err := kgo.NewClient(cfg.kgoOpts(s.brokers, s.conns)...)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	s.cl = cl
	return s, nil
}

// Close releases the Source's connections. Readers made by NewReader have
// their own and must be closed on their own. Closing twice is a no-op.
func (s *Source) Close() {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.cl.Close()
	})
}

func (s *Source) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// Ping asks the brokers for the cluster's metadata, naming no topic: nil
// when one answers, an error wrapping ErrUnreachable when none does (or
// ErrClosed). A caller that may read no topic at all uses it to tell an
// empty answer from brokers it could not reach.
func (s *Source) Ping(ctx context.Context) error {
	req := kmsg.NewPtrMetadataRequest()
	// Empty, not nil: nil asks for every topic.
	req.Topics = []kmsg.MetadataRequestTopic{}
	if _, err := req.RequestWith(ctx, s.cl); err != nil {
		return s.fail("ping", err)
	}
	return nil
}

// Partitions returns the topic's partition numbers, ascending. It fails
// with ErrTopicNotFound when the topic does not exist (it is never
// created), and with ErrUnreachable when no broker answers.
func (s *Source) Partitions(ctx context.Context, topic string) ([]int32, error) {
	md, err := s.metadata(ctx, "list partitions", topic)
	if err != nil {
		return nil, err
	}
	out := make([]int32, 0, len(md.leaders))
	for p := range md.leaders {
		out = append(out, p)
	}
	slices.Sort(out)
	return out, nil
}

// Watermarks returns the bounds of the given partitions of topic, or of
// all of them when none are given. Earliest is read before Head, so
// Earliest <= Head holds even while records are produced or deleted.
func (s *Source) Watermarks(ctx context.Context, topic string, partitions ...int32) (map[int32]Watermarks, error) {
	const op = "read watermarks"
	if len(partitions) == 0 {
		ps, err := s.Partitions(ctx, topic)
		if err != nil {
			return nil, err
		}
		partitions = ps
	}
	if err := s.checkArgs(topic, partitions...); err != nil {
		return nil, err
	}
	earliest, err := s.listOffsets(ctx, op, topic, partitions, -2)
	if err != nil {
		return nil, err
	}
	head, err := s.listOffsets(ctx, op, topic, partitions, -1)
	if err != nil {
		return nil, err
	}
	out := make(map[int32]Watermarks, len(partitions))
	for _, p := range partitions {
		out[p] = Watermarks{Earliest: earliest[p], Head: head[p]}
	}
	return out, nil
}

// PartitionWatermarks is Watermarks for one partition.
func (s *Source) PartitionWatermarks(ctx context.Context, topic string, partition int32) (Watermarks, error) {
	m, err := s.Watermarks(ctx, topic, partition)
	if err != nil {
		return Watermarks{}, err
	}
	return m[partition], nil
}

// Scan reads one partition from offset from up to (not including) to, in
// offset order, calling fn for each record; to == Head means the head when
// the scan starts. It returns the offset to continue from: to when it
// completed, or the offset of the record fn refused (fn's error is
// returned as is).
//
// Scan reads with plain fetch requests: no consumer group, no commit, no
// client-side state left behind, so it is safe beside a Reader on the same
// partition. It fails with an *OffsetError wrapping ErrOffsetNotRetained
// when from is below the earliest retained offset (or retention passes the
// scan while it runs), and ErrOffsetBeyondHead when from is past the head.
func (s *Source) Scan(ctx context.Context, topic string, partition int32, from, to int64, fn func(*kgo.Record) error) (int64, error) {
	const op = "scan"
	if err := s.checkArgs(topic, partition); err != nil {
		return from, err
	}
	if from < 0 {
		return from, invalidf("scan from offset %d", from)
	}
	md, err := s.metadata(ctx, op, topic)
	if err != nil {
		return from, err
	}
	if _, ok := md.leaders[partition]; !ok {
		return from, fmt.Errorf("%w: %s/%d (the topic has %d partitions)", ErrPartitionNotFound, topic, partition, len(md.leaders))
	}
	wm, err := s.PartitionWatermarks(ctx, topic, partition)
	if err != nil {
		return from, err
	}
	if err := offsetCheck(topic, partition, from, wm); err != nil {
		return from, err
	}
	if to < 0 || to > wm.Head {
		to = wm.Head
	}

	next := from
	stalls := 0
	for next < to {
		rp, err := s.fetch(ctx, &md, topic, partition, next)
		if err != nil {
			return next, err
		}
		if perr := kerr.ErrorForCode(rp.ErrorCode); perr != nil {
			if errors.Is(perr, kerr.OffsetOutOfRange) {
				// Retention or DeleteRecords overtook the scan (or the log
				// was truncated): say which.
				wm, err := s.PartitionWatermarks(ctx, topic, partition)
				if err != nil {
					return next, err
				}
				if err := offsetCheck(topic, partition, next, wm); err != nil {
					return next, err
				}
			}
			if !kerr.IsRetriable(perr) && !errors.Is(perr, kerr.OffsetOutOfRange) {
				return next, s.fail(op, fmt.Errorf("%s/%d at offset %d: %w", topic, partition, next, perr))
			}
			if stalls++; stalls > s.cfg.retries {
				return next, s.fail(op, fmt.Errorf("%s/%d at offset %d: %w", topic, partition, next, perr))
			}
			if err := s.backoff(ctx, stalls); err != nil {
				return next, s.fail(op, err)
			}
			if md, err = s.metadata(ctx, op, topic); err != nil {
				return next, err
			}
			continue
		}
		fp, after := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
			Offset:    next,
			Topic:     topic,
			Partition: partition,
		}, rp, s.decomp, nil)
		if fp.Err != nil {
			return next, s.fail(op, fmt.Errorf("%s/%d at offset %d: %w", topic, partition, next, fp.Err))
		}
		for _, r := range fp.Records {
			if r.Offset >= to {
				return to, nil
			}
			if err := fn(r); err != nil {
				return r.Offset, err
			}
		}
		if after <= next {
			// Kafka always returns at least one whole batch at the fetch
			// offset when it has one; an empty answer below the head is a
			// leader catching up. Retry a bounded number of times.
			if stalls++; stalls > s.cfg.retries {
				return next, s.fail(op, fmt.Errorf("%s/%d: no records at offset %d below head %d", topic, partition, next, to))
			}
			if err := s.backoff(ctx, stalls); err != nil {
				return next, s.fail(op, err)
			}
			continue
		}
		stalls = 0
		next = after
	}
	return min(next, to), nil
}

// Rescan returns the records of one aggregate in one partition, from
// offset from up to the head when it starts, in offset order: what a retry
// of a parked aggregate must handle again. The aggregate of each record is
// found as WithAggregate says; records without one never match. Errors are
// Scan's: ErrOffsetNotRetained means the parked records are gone and the
// entry can only be skipped.
func (s *Source) Rescan(ctx context.Context, topic string, partition int32, from int64, aggregate string) ([]*kgo.Record, error) {
	if aggregate == "" {
		return nil, invalidf("rescan: empty aggregate")
	}
	var out []*kgo.Record
	_, err := s.Scan(ctx, topic, partition, from, Head, func(r *kgo.Record) error {
		if a, err := s.cfg.aggregate.Aggregate(r); err == nil && a == aggregate {
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func offsetCheck(topic string, partition int32, off int64, wm Watermarks) error {
	e := &OffsetError{Topic: topic, Partition: partition, Offset: off, Earliest: wm.Earliest, Head: wm.Head}
	switch {
	case off < wm.Earliest:
		e.Err = ErrOffsetNotRetained
	case off > wm.Head:
		e.Err = ErrOffsetBeyondHead
	default:
		return nil
	}
	return e
}

func (s *Source) checkArgs(topic string, partitions ...int32) error {
	if s.isClosed() {
		return ErrClosed
	}
	if topic == "" {
		return invalidf("empty topic")
	}
	for _, p := range partitions {
		if p < 0 {
			return invalidf("partition %d", p)
		}
	}
	return nil
}

// backoff waits before retry n, or returns the context's error.
func (s *Source) backoff(ctx context.Context, n int) error {
	t := time.NewTimer(s.retryWait(n))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// topicMeta is what a scan needs from metadata: the topic id (fetch v13+
// names topics by id) and each partition's leader.
type topicMeta struct {
	id      [16]byte
	leaders map[int32]int32 // partition -> leader broker id (-1 if none)
}

func (s *Source) metadata(ctx context.Context, op, topic string) (topicMeta, error) {
	if err := s.checkArgs(topic); err != nil {
		return topicMeta{}, err
	}
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	req.AllowAutoTopicCreation = false
	resp, err := req.RequestWith(ctx, s.cl)
	if err != nil {
		return topicMeta{}, s.fail(op, err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				return topicMeta{}, fmt.Errorf("%w: %q", ErrTopicNotFound, topic)
			}
			return topicMeta{}, s.fail(op, fmt.Errorf("topic %q: %w", topic, err))
		}
		md := topicMeta{id: t.TopicID, leaders: make(map[int32]int32, len(t.Partitions))}
		for _, p := range t.Partitions {
			md.leaders[p.Partition] = p.Leader
		}
		return md, nil
	}
	return topicMeta{}, fmt.Errorf("%w: %q", ErrTopicNotFound, topic)
}

// listOffsets asks each partition's leader for the offset at a special
// timestamp: -2 is the earliest retained, -1 the head.
func (s *Source) listOffsets(ctx context.Context, op, topic string, partitions []int32, ts int64) (map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for _, p := range partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p
		rp.Timestamp = ts
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, s.cl)
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		// kgo finds no leader for a partition it does not know and fails
		// the whole request before asking anyone.
		return nil, s.unknown(ctx, op, topic, partitions, err)
	}
	if err != nil {
		return nil, s.fail(op, err)
	}
	out := make(map[int32]int64, len(partitions))
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				if errors.Is(err, kerr.UnknownTopicOrPartition) {
					return nil, s.unknown(ctx, op, topic, []int32{p.Partition}, err)
				}
				return nil, s.fail(op, fmt.Errorf("%s/%d: %w", topic, p.Partition, err))
			}
			out[p.Partition] = p.Offset
		}
	}
	for _, p := range partitions {
		if _, ok := out[p]; !ok {
			return nil, s.fail(op, fmt.Errorf("%s/%d: no offset in the reply", topic, p))
		}
	}
	return out, nil
}

// unknown tells a missing topic from a missing partition, which Kafka
// reports with one error code.
func (s *Source) unknown(ctx context.Context, op, topic string, partitions []int32, cause error) error {
	md, err := s.metadata(ctx, op, topic)
	if err != nil {
		return err
	}
	for _, p := range partitions {
		if _, ok := md.leaders[p]; !ok {
			return fmt.Errorf("%w: %s/%d (the topic has %d partitions)", ErrPartitionNotFound, topic, p, len(md.leaders))
		}
	}
	return s.fail(op, fmt.Errorf("%s %v: %w", topic, partitions, cause))
}

func (s *Source) fetch(ctx context.Context, md *topicMeta, topic string, partition int32, offset int64) (*kmsg.FetchResponseTopicPartition, error) {
	const op = "scan"
	leader := md.leaders[partition]
	if leader < 0 {
		return nil, s.fail(op, fmt.Errorf("%s/%d has no leader", topic, partition))
	}
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis = 0 // answer at once: a scan never waits for new records
	req.MinBytes = 1
	req.MaxBytes = s.cfg.scanBytes
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rt.TopicID = md.id
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = partition
	rp.FetchOffset = offset
	rp.PartitionMaxBytes = s.cfg.scanBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)

	resp, err := req.RequestWith(ctx, brokerRequester{s.cl.Broker(int(leader))})
	if err != nil {
		return nil, s.fail(op, err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, s.fail(op, fmt.Errorf("fetch %s/%d: %w", topic, partition, err))
	}
	for i := range resp.Topics {
		t := &resp.Topics[i]
		for j := range t.Partitions {
			if t.Partitions[j].Partition == partition {
				return &t.Partitions[j], nil
			}
		}
	}
	return nil, s.fail(op, fmt.Errorf("fetch %s/%d: partition missing from the reply", topic, partition))
}

// brokerRequester sends a request to one broker with kgo's connection
// retries, so a scan goes to the partition's leader.
type brokerRequester struct{ b *kgo.Broker }

func (r brokerRequester) Request(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	return r.b.RetriableRequest(ctx, req)
}

// fail wraps a call's error. When every recent connection attempt failed,
// or none ever completed, the error is ErrUnreachable and names the
// brokers and the last connection error: "context deadline exceeded" alone
// does not tell an operator that the address is wrong or the cluster is
// down.
func (s *Source) fail(op string, err error) error {
	if s.isClosed() || errors.Is(err, kgo.ErrClientClosed) {
		return fmt.Errorf("kafkasource: %s: %w", op, ErrClosed)
	}
	var kafkaErr *kerr.Error
	if errors.As(err, &kafkaErr) {
		return fmt.Errorf("kafkasource: %s: %w", op, err) // a broker answered
	}
	addr, last, completed := s.conns.state()
	switch {
	case last != nil && strings.Contains(err.Error(), last.Error()):
		return fmt.Errorf("%w: %s: %s: %w", ErrUnreachable, op, s.endpoint(), err)
	case last != nil:
		return fmt.Errorf("%w: %s: %s: last connection attempt (%s): %v: %w", ErrUnreachable, op, s.endpoint(), addr, last, err)
	case completed == 0 && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
		// Connected (or still connecting) but never got through the
		// handshake: a silent or wrong endpoint.
		return fmt.Errorf("%w: %s: %s: no broker completed a connection handshake: %w", ErrUnreachable, op, s.endpoint(), err)
	}
	return fmt.Errorf("kafkasource: %s: %w", op, err)
}

// endpoint describes where and how the Source connects, for errors: a
// handshake that ends in EOF is often a TLS or SASL mismatch, and saying
// which was configured saves a round of guessing.
func (s *Source) endpoint() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seeds %v", s.brokers)
	if s.cfg.tls != nil {
		b.WriteString(" over TLS")
	}
	if s.cfg.saslMechanism != "" {
		fmt.Fprintf(&b, " with SASL %s as %q", s.cfg.saslMechanism, s.cfg.saslUser)
	}
	return b.String()
}

// Reachable reports whether the brokers answer, from the traffic the
// Source and its Readers already have (it does no I/O): nil while the
// latest connection attempt or response read of at least one broker
// succeeded, or before any was made; otherwise an error wrapping
// ErrUnreachable that names the brokers and the last error. A Reader with
// partitions assigned fetches every WithFetchMaxWait, so during an outage
// it turns within a failed fetch and reconnection (a broker that stops
// answering without closing its connections: the request timeout), and
// back at the first answer once the brokers are back. It is safe for
// concurrent use.
func (s *Source) Reachable() error {
	addr, last, ok := s.conns.reachable()
	if ok {
		return nil
	}
	return fmt.Errorf("%w: %s: last attempt (%s): %v", ErrUnreachable, s.endpoint(), addr, last)
}

// connWatch remembers whether the latest connection attempt failed, from
// kgo's connect hook (called once per attempt, after the TLS and SASL
// handshakes), and per broker whether its latest attempt or response read
// failed (Reachable).
type connWatch struct {
	mu        sync.Mutex
	err       error
	addr      string
	completed int // successful attempts so far
	// latest is, per broker address, the error of its latest connection
	// attempt or response read (nil: it answered).
	latest map[string]error
	// lastAddr is the address of the latest failure noted in latest.
	lastAddr string
}

var (
	_ kgo.HookBrokerConnect = (*connWatch)(nil)
	_ kgo.HookBrokerRead    = (*connWatch)(nil)
)

func (w *connWatch) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	addr := net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port)))
	w.mu.Lock()
	defer w.mu.Unlock()
	w.err = err
	w.addr = addr
	if err == nil {
		w.completed++
	}
	w.noteLocked(addr, err)
}

// OnBrokerRead notes whether a response could be read: a connection that
// breaks after it was made (the broker went away) fails its reads before
// any new connection attempt is made. A read ended by the client (its
// context, or the client closing) says nothing about the broker.
func (w *connWatch) OnBrokerRead(meta kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	if err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed)) {
		return
	}
	addr := net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port)))
	w.mu.Lock()
	defer w.mu.Unlock()
	w.noteLocked(addr, err)
}

func (w *connWatch) noteLocked(addr string, err error) {
	if w.latest == nil {
		w.latest = map[string]error{}
	}
	w.latest[addr] = err
	if err != nil {
		w.lastAddr = addr
	}
}

// reachable reports whether some broker's latest attempt or read
// succeeded (ok also before any), else the latest failure.
func (w *connWatch) reachable() (addr string, last error, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.latest) == 0 {
		return "", nil, true
	}
	for _, err := range w.latest {
		if err == nil {
			return "", nil, true
		}
	}
	return w.lastAddr, w.latest[w.lastAddr], false
}

func (w *connWatch) state() (addr string, last error, completed int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.addr, w.err, w.completed
}

// retryWait is the wait before retry n: drawn uniformly from [d/2, d]
// for d = n x 50ms.
func (s *Source) retryWait(n int) time.Duration {
	d := time.Duration(n) * 50 * time.Millisecond
	s.jitMu.Lock()
	w := d/2 + time.Duration(s.jit.Int64N(int64(d/2)+1))
	s.jitMu.Unlock()
	return w
}

// randomSeed draws a seed from crypto/rand (on failure, the time).
func randomSeed() uint64 {
	var b [8]byte
	if _, err := crand.Read(b[:]); err != nil {
		return uint64(time.Now().UnixNano())
	}
	return binary.LittleEndian.Uint64(b[:])
}
