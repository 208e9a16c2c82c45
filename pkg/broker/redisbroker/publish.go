package redisbroker

import (
	"context"
	"strconv"
	"strings"

	"github.com/protctl/protctl/pkg/broker"
)

// PublishPartitioned appends data to a lane of partition key and records
// key in category's index, in one script, then publishes key on the
// category's wake channel (Layout.WakeChannel) for WatchPartitions.
//
// Recording in the same atomic step as the append is what keeps a
// non-empty stream from ever being out of the index: a reap cannot run
// between the two. Lane "" is the main lane; any other lane is a suffix
// (e.g. broker.DefaultBackfillSuffix), except "dlq", which is reserved
// for dead letters.
func (b *Broker) PublishPartitioned(ctx context.Context, category, key, lane string, data []byte) (string, error) {
	const op = "publish"
	if err := b.validCategory(op, category); err != nil {
		return "", err
	}
	if lane == broker.DLQSuffix || strings.Contains(lane, ":") {
		return "", &broker.InvalidArgumentError{Op: op, Arg: "lane", Value: strconv.Quote(lane), Reason: `must not be "dlq" or contain ":"`}
	}
	if err := b.validKey(op, key, b.cfg.backfillSuffix); err != nil {
		return "", err
	}
	if lane != "" && key == lane {
		return "", &broker.InvalidArgumentError{Op: op, Arg: "partition key", Value: strconv.Quote(key), Reason: "is the lane's suffix"}
	}
	l := b.cfg.layout
	keys := []string{l.LaneStream(category, key, lane), l.IndexKey(category)}
	id, err := publishScript.Run(ctx, b.client, keys, key, data, l.WakeChannel(category)).Text()
	if err != nil {
		return "", mapErr(call{op: op, keys: keys}, err)
	}
	return id, nil
}
