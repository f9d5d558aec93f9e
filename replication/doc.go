// Package replication owns the multi-cluster policy of an ebbtable
// instance (docs/replication.md): the puller that asks each peer cluster
// for news and applies it (records, schemas, instance metadata, age
// cutoffs), the answer to a peer's pull (what ships, under what budget,
// after what long poll), tombstone trimming once every peer is past them,
// the choice of the versions-GC leader, the merge of instance metadata
// (MergeMeta), consistency tokens (Marks, TableState), comparing and
// repairing a table between clusters (Diff), the coordinated raise of a max
// age (Raise), and the replication metrics.
//
// It speaks to peers through the Peer interface (and Holder, Applied and
// DiffPeer for the raise, the tokens and the diff) in Go types and to the
// storage through the narrow Engine and DiffEngine interfaces; it imports no
// transport.
// The server implements Peer over gRPC (EbbAdmin Pull/Snapshot/Join/Ready)
// and keeps the handlers, the peer registry and the join sequence. The
// puller paces itself on an injected clock.Clock, so tests run two or three
// engines joined by in-memory peers on a fake clock.
package replication
