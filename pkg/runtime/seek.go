package runtime

import (
	"context"

	"github.com/protctl/protctl/pkg/broker"
)

// SeekRequest is an operator's seek of one held partition of a topic
// subscription (protctl topics seek), recorded for the partition's owner
// to carry out online. docs/decisions/0044-topic-seek.md.
type SeekRequest struct {
	// ID names the request; the owner's result carries it.
	ID string `json:"id"`
	// Next is the checkpoint to set: the next offset to handle.
	Next int64 `json:"next"`
	// From is the checkpoint the plan saw; nil when none was saved. It
	// gives the seek its direction: a plan that moves forward (Next above
	// From) only skips, so an owner already at or past Next keeps its
	// position rather than handling records again (see Forward); any
	// other seek sets Next exactly.
	From *int64 `json:"from,omitempty"`
	// Lease is the fence token (owner:generation) the plan saw; an owner
	// holding another token answers SeekStale and changes nothing.
	Lease string `json:"lease"`
	// By names the operator.
	By string `json:"by,omitempty"`
	// RequestedAtMs is when it was recorded (the requester's clock, ms
	// since the epoch).
	RequestedAtMs int64 `json:"requestedAtMs"`
}

// Forward says whether the plan moved the checkpoint forward: records
// are skipped, none is to be handled again.
func (r SeekRequest) Forward() bool { return r.From != nil && r.Next > *r.From }

// Seek result statuses.
const (
	// SeekDone: the owner set the checkpoint and reads from it.
	SeekDone = "done"
	// SeekStale: the partition's lease is no longer the one the request
	// was made for; nothing changed.
	SeekStale = "stale"
)

// SeekResult is the owner's answer to a SeekRequest.
type SeekResult struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	// From is the checkpoint the owner's in-memory position stood at
	// (the low watermark of its window) when it applied the seek; -1 when
	// not applied.
	From int64 `json:"from"`
	// Next is the checkpoint set: the request's, or for a forward seek
	// the owner's position when it was already past it.
	Next int64 `json:"next"`
	// Lease is the owner's fence token.
	Lease string `json:"lease"`
	// AtMs is when the owner answered (its clock, ms since the epoch).
	AtMs int64 `json:"atMs"`
}

// CheckpointSeeker is the optional capability of a Checkpoints store
// that lets a topic's owner carry out operators' seeks (found by type
// assertion; redisstore.Store implements it). A store without it leaves
// seek requests unanswered.
type CheckpointSeeker interface {
	// PendingSeeks returns subscription's seek requests in leaseGroup by
	// partition (empty when none). Safe for concurrent use.
	PendingSeeks(ctx context.Context, leaseGroup, subscription string) (map[int32]SeekRequest, error)
	// WatchSeeks returns a channel that receives a hint (a subscription
	// name) when a request of leaseGroup is recorded; it closes when ctx
	// ends or a hint may have been lost (the subscription broke, the
	// reader fell behind), and the caller then watches again and re-reads
	// PendingSeeks. Callers also poll PendingSeeks.
	WatchSeeks(ctx context.Context, leaseGroup string) (<-chan string, error)
	// CompleteSeek answers the request res.ID of partition, fenced by f
	// (a *broker.LeaseLostError when f no longer holds): with
	// res.Status SeekDone it also sets the checkpoint to res.Next, which
	// may move it backwards, in the same atomic step. It returns false,
	// changing nothing, when the request is no longer pending.
	CompleteSeek(ctx context.Context, f broker.Fence, leaseGroup, subscription string, partition int32, res SeekResult) (bool, error)
}
