// Package runtime is protctl's node runtime: ordered, per-key event
// processing with exactly one owner per partition, fenced by generations.
//
// A node runs subscriptions of two kinds over one service, each from an
// engine package of its own:
//
//   - pkg/runtime/partitioned: partitioned subscriptions over Redis
//     per-key streams (one lease per partition key and group, see
//     pkg/broker), and
//   - pkg/runtime/topic: topic subscriptions over Kafka (the topic's
//     partitions leased in the lease group (service, "topic:<topic>") and
//     read by manual assignment).
//
// This package is what they share and what every program links: the Node,
// the Subscription contract an engine implements, the Handler contract and
// failure classification, the failure ledger's records (ledger.Parked), the
// stores' interfaces, node status records and Observer hooks; the clock is
// injected (pkg/runtime/clock). It imports no engine and no Kafka client,
// so a program that uses only Redis does not link one.
// Ownership is decided by rendezvous hashing (pkg/runtime/hrw) over the
// live members of a service.
//
// Failure classes decide what happens to a message whose handler fails:
//
//	aggregate (default)  retry with backoff up to the subscription's
//	                     attempts, then park the aggregate (or partition)
//	                     in the ledger and move on with the others
//	systemic             the dependency is down, not the message: pause
//	                     the partition and retry with backoff, never park
//	fatal                stop the subscription and report to the node
//
// This file's package is named runtime and shadows the standard library's;
// files that need both import the standard one as goruntime.
package runtime
