// Package bench owns ebbtable's load workloads: the same client-side
// workloads run against any Bigtable endpoint, with latency percentiles.
//
// Every workload talks to its endpoint only through the official client
// (cloud.google.com/go/bigtable), so ebbtable and the reference emulator
// (bttest) are measured the same way:
//
//   - Writes: ApplyBulk in batches (default 100 rows of one ~100-byte cell).
//   - Scans: full-table ReadRows, counting rows.
//   - PointReads: ReadRow on random existing keys.
//   - PointWrites: Apply (MutateRow) of one SetCell to new rows.
//
// Keys and values are derived from a seed, so two runs with the same Config
// write and read the same data. Each workload runs with Config.Workers
// concurrent client goroutines and reports throughput and per-operation
// p50/p99 latency (an HDR histogram at 3 significant digits).
//
// Run starts each target in turn, by default as its own process (Binaries:
// ebbtable's binary on a temporary or given directory with its default
// durable settings, the reference emulator's binary, and the ceiling: a
// server answering from a Go map, which bounds the ratio any server could
// reach with this client on this machine), or with Options.InProcess inside
// this process. It alternates them for Options.Rounds, measures each
// server process's own CPU beside the client's, and builds a Report of
// median ratios with their ranges; cmd/ebbbench is its command-line front
// end.
package bench
