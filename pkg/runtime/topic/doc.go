// Package topic is the runtime's Kafka engine. A Consumer (New) runs the
// subscriptions of one topic on one node: the topic's partitions are
// leased in the lease group (service, "topic:<topic>") on the broker's
// fenced lease primitives and spread over the service's nodes by
// rendezvous hashing; each held partition is read once (by manual
// assignment, no consumer group) and its records fan out to every
// subscription, which keeps one record at a time per aggregate.
// Progress is a fenced checkpoint per (lease group, subscription,
// partition).
//
// Where to read: topic.go (the Consumer's life and status), coord.go
// (joins and HRW), lease.go (renewal, trust), part.go (a held partition:
// reading, checkpoints, handoff), and the lanes, divided by concern:
// lanes.go (fan-out and delivery), queue.go (the block queue), window.go
// (the in-flight window), dedup.go, identity.go, workers.go, park.go
// (park, retry, skip) and catchup.go. Decision 0006 has the design.
package topic
