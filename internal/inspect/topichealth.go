package inspect

import (
	"context"
	"errors"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// RecordTimes reads records' timestamps, for the lag in seconds of a
// topic partition: the age of the record at a subscription's checkpoint.
// *kafkasource.Source implements it.
type RecordTimes interface {
	// Scan calls fn for the records of [from, to) of a partition; fn's
	// error stops it and is returned.
	Scan(ctx context.Context, topic string, partition int32, from, to int64, fn func(*kgo.Record) error) (int64, error)
}

var _ RecordTimes = (*kafkasource.Source)(nil)

// errFirstRecord stops a Scan after its first record.
var errFirstRecord = errors.New("inspect: first record read")

// topicHealth fills each subscription's Health on t's partitions. The
// lag is head - checkpoint (the earliest retained offset without one);
// its age is the timestamp of the record at the checkpoint against
// Redis's clock, read when kafka implements RecordTimes, one record per
// subscription behind. A partition parked in the failure ledger for the
// subscription is HALTED.
func (in *Inspector) topicHealth(ctx context.Context, kafka Offsets, t *Topic, th Thresholds) error {
	now, err := in.serverTime(ctx)
	if err != nil {
		return err
	}
	parked := map[[2]string]bool{}
	if in.cfg.ledger != nil {
		ps, err := in.cfg.ledger.ListParked(ctx, "")
		if err != nil {
			return err
		}
		for _, p := range ps {
			if p.Source == source.Kafka && p.Topic == t.Topic {
				parked[[2]string{p.Subscription, p.Partition}] = true
			}
		}
	}
	times, _ := kafka.(RecordTimes)
	for i := range t.Partitions {
		tp := &t.Partitions[i]
		field := strconv.FormatInt(int64(tp.Partition), 10)
		for j := range tp.Subscriptions {
			s := &tp.Subscriptions[j]
			from := s.Next
			if from < tp.Earliest {
				from = tp.Earliest
			}
			lag := max(tp.Head-from, 0)
			h := &Health{LagEntries: ptr(lag)}
			if lag > 0 {
				h.OldestUnhandledID = ptr(strconv.FormatInt(from, 10))
				if times != nil {
					_, err := times.Scan(ctx, t.Topic, tp.Partition, from, from+1, func(r *kgo.Record) error {
						age := max(now.Sub(r.Timestamp), 0)
						h.LagSeconds = ptr(age.Seconds())
						return errFirstRecord
					})
					// Retention may pass the checkpoint between the two
					// reads: the age is then unknown, not an error.
					if err != nil && !errors.Is(err, errFirstRecord) && !errors.Is(err, kafkasource.ErrOffsetNotRetained) && !errors.Is(err, kafkasource.ErrOffsetBeyondHead) {
						return err
					}
				}
			}
			h.decide(tp.State == LeaseHeld, parked[[2]string{s.Name, field}], s.Paused, th)
			s.Health = h
		}
	}
	return nil
}

// TopicHealthOf recomputes s's status with the operator's pause.
func TopicHealthOf(tp *TopicPartition, s *TopicSubscription, parked, paused bool, th Thresholds) {
	if s.Health != nil {
		s.Health.decide(tp.State == LeaseHeld, parked, paused, th)
	}
}
