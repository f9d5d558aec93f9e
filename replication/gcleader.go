package replication

import "github.com/ebbtable/ebbtable/changestream"

// Garbage collection across clusters (docs/replication.md, "GC across
// clusters"). Collections by age run in every cluster on its own and stay
// local. Collections by versions are decided once, by the instance's GC
// leader, and replicate like writes: Answer ships them as
// GARBAGE_COLLECTION records and peers apply them with ApplyReplicated.

// IsGCLeader says whether this cluster collects versions-eligible cells:
// it has the smallest id among itself and its ready peers. A cluster that
// does not replicate always does.
func (r *Replicator) IsGCLeader() bool {
	if _, ok := r.o.Engine.Replicating(); !ok {
		return true
	}
	for _, p := range r.o.Peers.List() {
		// A smaller-id peer leads while it answers; if it stops (its
		// pulls fail for a while), the next one takes over, so versions
		// GC does not stall behind a dead cluster. Two clusters deciding
		// for a moment is harmless: a versions deletion is the same
		// decision on either, applied last-writer-wins.
		if p.Ready && p.ID < r.o.ClusterID && r.o.Peers.Healthy(p.ID) {
			return false
		}
	}
	return true
}

// ShipsToPeers says whether a change-stream record goes to peers: a user
// write made here, or a versions collection decided here.
func ShipsToPeers(rec changestream.Record) bool {
	if rec.SourceCluster != "" {
		return false
	}
	switch rec.Type {
	case changestream.User:
		return !rec.IsSystem
	case changestream.GarbageCollection:
		return rec.Reason == changestream.ReasonGCVersions
	}
	return false
}

// gcDeletes counts the cell deletions of the garbage-collection records
// among recs.
func gcDeletes(recs []changestream.Record) int {
	n := 0
	for _, r := range recs {
		if r.Type == changestream.GarbageCollection {
			n += len(r.Mods)
		}
	}
	return n
}
