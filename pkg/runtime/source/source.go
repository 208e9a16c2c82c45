// Package source names where a message, a lease or a parked entry comes
// from: a Redis partitioned subscription or a Kafka topic subscription.
//
// It is a leaf of its own because every record of the runtime carries it
// (runtime.Message, the status records, the ledger's entries, the
// observer's events) and the packages holding those records import each
// other in one direction only (docs/decisions/0040-runtime-packages.md).
package source

// Kind says where a message came from. Its values are the stable words of
// the JSON records and the CLI.
type Kind string

const (
	Redis Kind = "redis"
	Kafka Kind = "kafka"
)
