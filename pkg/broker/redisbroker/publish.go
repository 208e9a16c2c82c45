package redisbroker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

// PublishPartitioned appends data to a lane of partition key and records
// key in category's index, then publishes key on the category's wake
// channel (Layout.WakeChannel) for WatchPartitions. Lane "" is the main
// lane; any other lane is a suffix (e.g. broker.DefaultBackfillSuffix),
// except "dlq", which is reserved for dead letters.
//
// In the Protean layout all of it is one script: recording in the same
// atomic step as the append keeps a non-empty stream from ever being out
// of the index, as a reap cannot run between the two.
//
// In the cluster layout the lane and the index live in different slots,
// so no script can touch both. Publish then takes three round trips: it
// checks the index's type (so that a wrong-type index is refused before
// anything is appended), appends (append.lua, on the partition's slot),
// and then records the key and wakes watchers (record.lua, on the index's
// slot). Append first, then record: a reap that runs between the two
// either sees the new entry and refuses (and restores the index entry it
// removed), or ran its delete before the append, and then the record that
// follows puts the key back; either way no non-empty stream is left out
// of the index (docs/decisions/0005-cluster-layout.md walks through the
// interleavings). A publisher that dies between the append and the record
// leaves a non-empty stream outside the index until the key's next
// publish, or until RecordPartition repairs it.
//
// With WithPublishReplicas the call returns only once the replicas
// acknowledged the entry (in the cluster layout, the append and then the
// record), or fails with a *broker.NotReplicatedError that carries the
// entry id.
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
	if l.IsCluster() {
		return b.publishCluster(ctx, category, key, lane, data)
	}
	keys := []string{l.LaneStream(category, key, lane), l.IndexKey(category)}
	args := []any{key, data, l.WakeChannel(category)}
	if w := waitSpec(op, b.cfg.publishReplicas); w != nil {
		return b.runReplicated(ctx, publishScript, keys, args, w)
	}
	id, err := publishScript.Run(ctx, b.client, keys, args...).Text()
	if err != nil {
		return "", mapErr(call{Op: op, Keys: keys}, err)
	}
	return id, nil
}

// runReplicated runs a publish step (a script that returns the entry id
// or, for record.lua, nothing) and WAIT on one connection; a step the
// replicas did not acknowledge fails with a *broker.NotReplicatedError
// carrying id (the id the script returned, or idOf).
func (b *Broker) runReplicated(ctx context.Context, s *redis.Script, keys []string, args []any, w *waitFor, idOf ...string) (string, error) {
	cmds, waits := b.runScripts(ctx, s, []scriptCall{{keys: keys, args: args}}, w)
	if err := cmds[0].Err(); err != nil {
		return "", mapErr(call{Op: w.op, Keys: keys}, err)
	}
	id, _ := cmds[0].Val().(string)
	if len(idOf) > 0 {
		id = idOf[0]
	}
	r := waits[0]
	if r.err != nil {
		return "", fmt.Errorf("%w (entry %s was written to %s; whether the replicas have it is unknown)", r.err, id, keys[0])
	}
	if err := w.notReplicated(keys[0], id, r.acked); err != nil {
		return "", err
	}
	return id, nil
}

// publishCluster is PublishPartitioned in the cluster layout: check the
// index, append, record (see PublishPartitioned).
func (b *Broker) publishCluster(ctx context.Context, category, key, lane string, data []byte) (string, error) {
	const op = "publish"
	l := b.cfg.layout
	index := l.IndexKey(category)
	if err := b.wantType(ctx, op, index, "set"); err != nil {
		return "", err
	}
	stream := []string{l.LaneStream(category, key, lane)}
	w := waitSpec(op, b.cfg.publishReplicas)
	var id string
	var err error
	if w != nil {
		id, err = b.runReplicated(ctx, appendScript, stream, []any{data}, w)
	} else {
		id, err = appendScript.Run(ctx, b.client, stream, data).Text()
		if err != nil {
			err = mapErr(call{Op: op, Keys: stream}, err)
		}
	}
	// An append the replicas did not acknowledge is on the primary all
	// the same: it is recorded, so that it is not left outside the index
	// if it survives, and then the call reports it.
	var nre *broker.NotReplicatedError
	if err != nil && !errors.As(err, &nre) {
		return "", err
	}
	if nre != nil {
		id = nre.ID
	}
	if w != nil {
		_, err = b.runReplicated(ctx, recordScript, []string{index}, []any{key, l.WakeChannel(category)}, w, id)
	} else {
		err = b.record(ctx, op, index, key, l.WakeChannel(category))
	}
	if nre != nil && (err == nil || errors.Is(err, broker.ErrNotReplicated)) {
		return "", nre
	}
	if err != nil {
		return "", fmt.Errorf("%w (entry %s was appended to %s; RecordPartition(%q, %q) records it)", err, id, stream[0], category, key)
	}
	return id, nil
}

// record adds key to index and wakes the category's watchers
// (record.lua), the cluster layout's second publish step.
func (b *Broker) record(ctx context.Context, op, index, key, channel string) error {
	keys := []string{index}
	if err := recordScript.Run(ctx, b.client, keys, key, channel).Err(); err != nil {
		return mapErr(call{Op: op, Keys: keys}, err)
	}
	return nil
}

// wantType fails with a *broker.WrongTypeError, before anything is
// written, when key holds something other than want (or nothing).
func (b *Broker) wantType(ctx context.Context, op, key, want string) error {
	t, err := b.client.Type(ctx, key).Result()
	if err != nil {
		return mapErr(call{Op: op, Key: key, Want: want}, err)
	}
	if t != "none" && t != want {
		return &broker.WrongTypeError{Op: op, Key: key, Want: want, Got: t}
	}
	return nil
}
