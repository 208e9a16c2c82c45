// Package partitioned is the runtime's Redis engine: the consumer side of
// Protean's sequential_by. A Subscription (New) processes each partition
// key of its categories on exactly one node at a time, in order, under a
// fenced lease (pkg/broker), the keys spread over the service's live nodes
// by rendezvous hashing; a Publisher appends to the partitions.
//
// Where to read: partitioned.go (the life of a partition, Start and Stop),
// coord.go (assignment and the coordinator's events), worker.go (one
// partition's reads, handler calls, parking and acks), lease.go (batched
// renewal and the trust watch), watch.go (the blocking waits on idle
// partitions), announce.go (idle partitions woken by the server's
// announcements of appends, checked rather than waited on while those
// run), live.go (partitions woken together read together), discover.go
// (new keys, the announcements), reader.go (pinned connections) and
// capabilities.go (which optional broker capabilities it uses, and what
// their absence costs). Decisions 0004, 0031, 0035 and 0049 explain the
// shape.
package partitioned
