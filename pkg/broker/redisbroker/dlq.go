package redisbroker

import (
	"context"
	"crypto/sha1" //nolint:gosec // a fingerprint to compare entries, not a secret
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// EntryDigest is the fingerprint of a stream entry an operator's plan
// records and the dead-letter scripts compare: SHA-1 over each of the
// entry's field names and values, in the order the server returns them,
// as its length, ':' and itself, joined by ','. lib.lua's entry_digest is
// the script's copy.
func EntryDigest(flat []string) string {
	var b strings.Builder
	for i, s := range flat {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	sum := sha1.Sum([]byte(b.String())) //nolint:gosec // see the import
	return hex.EncodeToString(sum[:])
}

// ReplayedMarkerSuffix names the hash beside a dead-letter stream that
// remembers which of its dead letters were replayed, and as what entry:
// C:K:dlq:__replayed__ (in the dead-letter stream's slot in the cluster
// layout). Its members expire ReplayedMemory after the last replay.
const ReplayedMarkerSuffix = ":__replayed__"

// ReplayedMemory is how long a replayed dead letter is remembered as
// such (ReplayDeadLetter's ReplayAlready): a plan applied again within it
// reports the items it replayed before as done, not as gone.
const ReplayedMemory = 7 * 24 * time.Hour

// ReplayVerdict is what ReplayDeadLetter did.
type ReplayVerdict string

// The verdicts of ReplayDeadLetter.
const (
	// ReplayDone: appended to the destination and deleted from the
	// dead-letter stream, in one step.
	ReplayDone ReplayVerdict = "replayed"
	// ReplayAlready: the dead letter was replayed before (within
	// ReplayedMemory), as the id returned; nothing changed.
	ReplayAlready ReplayVerdict = "already"
	// ReplayGone: no such dead letter (purged, or replayed longer ago than
	// ReplayedMemory); nothing changed.
	ReplayGone ReplayVerdict = "gone"
	// ReplayChanged: the id holds other fields than the digest given;
	// nothing changed.
	ReplayChanged ReplayVerdict = "changed"
)

// DeadLetterReplay is one dead letter to replay.
type DeadLetterReplay struct {
	// DLQStream and ID name the dead letter; Digest is EntryDigest of the
	// fields it must still hold.
	DLQStream, ID, Digest string
	// Stream is the destination: a partition's lane, or a category's
	// stream for a Protean category dead letter.
	Stream string
	// Category and Key, when Key is set, are the partition Stream belongs
	// to: the key is recorded in the category's index and its watchers
	// are woken, as a publish does.
	Category, Key string
	// Fields are the new entry's fields (broker.ReplayEntry).
	Fields [][2]string
}

// ReplayDeadLetter appends r.Fields to r.Stream and deletes the dead
// letter, in one script, only while the dead letter still holds what
// r.Digest says: a moved dead letter can be replayed only once. The new
// entry lands after everything already in the stream.
//
// With r.Key set the key is recorded in the category's index and the
// category's watchers are woken, as PublishPartitioned does: in the
// Protean layout in the same script; in the cluster layout (the index is
// in another slot) in a second step right after, which only runs when the
// first replayed (a failure there is returned, with the entry already
// appended; RecordPartition repairs it). r.Stream must then be in the
// dead-letter stream's slot (a partition's lanes and its C:{K}:dlq are),
// so a category dead letter (C:dlq) cannot be replayed in the cluster
// layout: the call is refused with broker.ErrInvalidArgument.
func (b *Broker) ReplayDeadLetter(ctx context.Context, r DeadLetterReplay) (verdict ReplayVerdict, id string, err error) {
	const op = "replay dead letter"
	if err := errors.Join(nonEmpty(op, "dead-letter stream", r.DLQStream), validID(op, r.ID),
		nonEmpty(op, "digest", r.Digest), nonEmpty(op, "stream", r.Stream)); err != nil {
		return "", "", err
	}
	if r.Stream == r.DLQStream {
		return "", "", &broker.InvalidArgumentError{Op: op, Arg: "stream", Value: strconv.Quote(r.Stream), Reason: "must differ from the dead-letter stream"}
	}
	if len(r.Fields) == 0 {
		return "", "", &broker.InvalidArgumentError{Op: op, Arg: "fields", Value: "none", Reason: "an entry needs at least one field"}
	}
	l := b.cfg.layout
	if r.Key != "" {
		if err := b.validCategory(op, r.Category); err != nil {
			return "", "", err
		}
		if err := b.validKey(op, r.Key, b.cfg.backfillSuffix); err != nil {
			return "", "", err
		}
	}
	if l.IsCluster() && r.Key == "" {
		return "", "", &broker.InvalidArgumentError{Op: op, Arg: "dead-letter stream", Value: strconv.Quote(r.DLQStream),
			Reason: "a category's dead letter and its destination are in different cluster slots"}
	}
	keys := []string{r.DLQStream, r.Stream, r.DLQStream + ReplayedMarkerSuffix}
	args := []any{r.ID, r.Digest, ReplayedMemory.Milliseconds(), r.Key, ""}
	if r.Key != "" && !l.IsCluster() {
		keys = append(keys, l.IndexKey(r.Category))
		args[4] = l.WakeChannel(r.Category)
	}
	for _, f := range r.Fields {
		args = append(args, f[0], f[1])
	}
	res, err := dlqReplayScript.Run(ctx, b.client, keys, args...).Slice()
	if err != nil {
		return "", "", mapErr(call{Op: op, Keys: keys}, err)
	}
	if len(res) != 2 {
		return "", "", fmt.Errorf("redisbroker: %s: unexpected reply %v", op, res)
	}
	v, _ := res[0].(string)
	id, _ = res[1].(string)
	switch verdict = ReplayVerdict(v); verdict {
	case ReplayAlready, ReplayGone, ReplayChanged:
		return verdict, id, nil
	case ReplayDone:
	default:
		return "", "", fmt.Errorf("redisbroker: %s: unexpected verdict %q", op, v)
	}
	if r.Key != "" && l.IsCluster() {
		if err := b.record(ctx, op, l.IndexKey(r.Category), r.Key, l.WakeChannel(r.Category)); err != nil {
			return verdict, id, fmt.Errorf("%w (the dead letter was replayed to %s as %s; RecordPartition(%q, %q) records the key)", err, r.Stream, id, r.Category, r.Key)
		}
	}
	return verdict, id, nil
}

// DeleteVerdict is what DeleteDeadLetter did.
type DeleteVerdict string

// The verdicts of DeleteDeadLetter.
const (
	// DeleteDone: the dead letter was deleted.
	DeleteDone DeleteVerdict = "deleted"
	// DeleteGone: no such dead letter; nothing changed.
	DeleteGone DeleteVerdict = "gone"
	// DeleteChanged: the id holds other fields than the digest given;
	// nothing changed.
	DeleteChanged DeleteVerdict = "changed"
)

// DeleteDeadLetter deletes dead letter id of dlqStream in one script,
// only while it still holds what digest (EntryDigest) says.
func (b *Broker) DeleteDeadLetter(ctx context.Context, dlqStream, id, digest string) (DeleteVerdict, error) {
	const op = "delete dead letter"
	if err := errors.Join(nonEmpty(op, "dead-letter stream", dlqStream), validID(op, id), nonEmpty(op, "digest", digest)); err != nil {
		return "", err
	}
	keys := []string{dlqStream}
	v, err := dlqDeleteScript.Run(ctx, b.client, keys, id, digest).Text()
	if err != nil {
		return "", mapErr(call{Op: op, Keys: keys}, err)
	}
	switch d := DeleteVerdict(v); d {
	case DeleteDone, DeleteGone, DeleteChanged:
		return d, nil
	}
	return "", fmt.Errorf("redisbroker: %s: unexpected verdict %q", op, v)
}
