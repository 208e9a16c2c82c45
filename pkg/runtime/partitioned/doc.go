// Package partitioned is the runtime's Redis engine: the consumer side of
// Protean's sequential_by. A Subscription (New) processes each partition
// key of its categories on exactly one node at a time, in order, under a
// fenced lease (pkg/broker), the keys spread over the service's live nodes
// by rendezvous hashing; a Publisher appends to the partitions.
//
// Where to read: partitioned.go (the life of a partition, Start and Stop),
// coord.go (assignment and the coordinator's events), worker.go (one
// partition's reads, handler calls, parking and acks), lease.go (batched
// renewal and the trust watch), watch.go (the one blocking wait on idle
// partitions), live.go (partitions woken together read together),
// discover.go (new keys), reader.go (pinned connections) and
// capabilities.go (which optional broker capabilities it uses, and what
// their absence costs). Decisions 0004, 0031 and 0035 explain the shape.
package partitioned
