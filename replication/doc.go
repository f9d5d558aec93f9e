// Package replication owns the multi-cluster policy of an ebbtable
// instance (docs/replication.md): the puller that asks each peer cluster
// for news and applies it (records, schemas, instance metadata, age
// cutoffs), the answer to a peer's pull (what ships, under what budget,
// after what long poll), tombstone trimming once every peer is past them,
// the choice of the versions-GC leader, and the replication metrics.
//
// It speaks to peers through the Peer interface in Go types and to the
// storage through the narrow Engine interface; it imports no transport.
// The server implements Peer over gRPC (EbbAdmin Pull/Snapshot/Join/Ready)
// and keeps the handlers, the peer registry and the join sequence. The
// puller paces itself on an injected clock.Clock, so tests run two or three
// engines joined by in-memory peers on a fake clock.
package replication
