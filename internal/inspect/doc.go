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
// SSCAN and reads the keys in chunks (WithChunk, 250 by default), each in
// two pipelined round trips: the main lane's XLEN, newest id (XREVRANGE
// COUNT 1) and XINFO GROUPS plus an XINFO GROUPS probe of the backfill
// lane, then one MGET of the groups' lease and generation keys, a PTTL per
// lease, and the backfill lanes that exist. Chunks are read by a few
// goroutines at once (WithConcurrency, 4), each on its own connection, so
// that the client decodes one chunk while the server answers another;
// results are delivered in index order, and at most concurrency+1 chunks
// are held beyond what the caller keeps. Listing 100,000 partitions is
// about 900 round trips instead of 900,000 (bench/inspect_test.go).
//
// The only keyspace scans are Categories, Leases without a category, and
// Fsck; they are paced (a pause between SCAN calls) and report progress
// through a callback. On Redis Cluster the scans visit every master.
//
// # Time
//
// Ages (idleMs) are measured on the server's clock: each call reads TIME
// once and compares it with the millisecond part of entry ids, so a
// skewed operator laptop never makes a partition look idle or young.
package inspect
