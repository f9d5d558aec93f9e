// Package storage owns ebbtable's bytes on disk: the Pebble database, the
// order-preserving key encoding of cells and metadata, the value header, and
// durable batches and snapshots. It knows nothing of gRPC, filters or GC
// rules; docs/storage-format.md describes the format it writes.
package storage
