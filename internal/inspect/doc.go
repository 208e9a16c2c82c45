// Package inspect reads the state of partitioned streams, leases, the
// failure ledger and node membership from Redis and returns typed,
// read-only snapshots. It never writes and never prints: the CLI
// (cmd/protctl) and the dashboard (internal/tui) render what it returns,
// and internal/repair builds its plans on it.
//
// # Shapes
//
// Every snapshot type carries the JSON field names of the CLI contract
// (docs/cli.md): lowerCamelCase, durations as integer milliseconds in
// fields ending in Ms, Redis ids as strings, times as time.Time (RFC 3339
// UTC when the printer encodes them), and unknown values as null
// (pointers).
//
// # Cost
//
// Reads are pipelined: Partitions pages through a category's index with
// SSCAN and reads each page's partitions in two pipelined round trips
// (streams and groups first, then the leases and generations of the
// groups found), so listing 100,000 partitions costs a few hundred round
// trips, not a million. The only keyspace scans are Categories, Leases
// without a category, and Fsck; they are paced (a pause between SCAN
// calls) and report progress through a callback. On Redis Cluster the
// scans visit every master.
//
// # Time
//
// Ages (idleMs) are measured on the server's clock: each call reads TIME
// once and compares it with the millisecond part of entry ids, so a
// skewed operator laptop never makes a partition look idle or young.
package inspect
