package kafkasource

import (
	"context"
	"time"
)

// OffsetsForTime returns, per partition of topic (every partition when
// none are given), the offset of the first record whose timestamp is at
// or after at (Kafka's ListOffsets by timestamp), or the head when no
// record is that recent. A time before the first retained record gives
// the earliest retained offset.
func (s *Source) OffsetsForTime(ctx context.Context, topic string, at time.Time, partitions ...int32) (map[int32]int64, error) {
	const op = "list offsets by time"
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
	ms := at.UnixMilli()
	if ms < 0 {
		ms = 0
	}
	out, err := s.listOffsets(ctx, op, topic, partitions, ms)
	if err != nil {
		return nil, err
	}
	var past []int32
	for _, p := range partitions {
		if out[p] < 0 {
			past = append(past, p)
		}
	}
	if len(past) > 0 {
		head, err := s.listOffsets(ctx, op, topic, past, -1)
		if err != nil {
			return nil, err
		}
		for _, p := range past {
			out[p] = head[p]
		}
	}
	return out, nil
}
