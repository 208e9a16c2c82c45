package topic

import "context"

// AbandonTopic stops t the way a crash does: no handoff, no checkpoint
// saved, no lease released.
func Abandon(t *Consumer) { t.abandon() }

// SetTopicRenewGate installs a hook the renewer calls before every
// renewal round; blocking in it stalls renewals. Call it before Start.
func SetRenewGate(t *Consumer, gate func(ctx context.Context)) { t.renewGate = gate }

// SaveTopicCheckpoints runs one checkpoint pass over the held partitions
// now and returns its first error.
func SaveCheckpoints(ctx context.Context, t *Consumer) error { return t.saveAll(ctx) }

// SetTopicHandoffHook installs a hook called when a partition's handoff
// begins, once no record may start any more. Call it before Start.
func SetHandoffHook(t *Consumer, hook func(p int32)) { t.handoffHook = hook }

// SetSeekHook installs a hook called when a partition's online seek
// begins, once no record of the subscription may start any more. Call it
// before Start.
func SetSeekHook(t *Consumer, hook func(p int32)) { t.seekHook = hook }
