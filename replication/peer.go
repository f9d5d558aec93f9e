package replication

import (
	"context"
	"slices"
	"time"

	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/table"
)

// Peer is another cluster of the instance, as this one calls it. The server
// implements it over gRPC; tests join engines in memory.
type Peer interface {
	// Pull asks the peer for the records that originated there after the
	// given positions (a long poll of up to req.Wait).
	Pull(ctx context.Context, req PullRequest) (*PullResponse, error)
	// Snapshot streams a consistent copy of the peer's tables to fn,
	// ending with an ExportEnd item whose Closed is set.
	Snapshot(ctx context.Context, fn func(SnapshotItem) error) error
	// Join registers the calling cluster with the peer.
	Join(ctx context.Context, req JoinRequest) (*JoinResponse, error)
	// Ready tells the peer the calling cluster finished copying its data.
	Ready(ctx context.Context, cluster string) error
}

// PeerInfo is what a cluster knows about a peer.
type PeerInfo struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
	// Ready is set once the peer finished copying the instance's data.
	Ready bool `json:"ready"`
	// Nodes are the addresses of the live nodes of a peer of several
	// nodes, as its last answer listed them (empty for a process alone):
	// this cluster pulls from any of them.
	Nodes []string `json:"nodes,omitempty"`
}

// Same says whether two infos say the same.
func (p PeerInfo) Same(q PeerInfo) bool {
	return p.ID == q.ID && p.Addr == q.Addr && p.Ready == q.Ready && slices.Equal(p.Nodes, q.Nodes)
}

// Directory is the registry of peers the puller reads and grows (the
// server's durable peer set).
type Directory interface {
	// Get returns a peer's info, false if it is not (or no longer) a peer.
	Get(id string) (PeerInfo, bool)
	// List returns the peers, sorted by id.
	List() []PeerInfo
	// Gone says whether a cluster was removed here and has not joined again.
	Gone(id string) bool
	// Add records a peer (or its new address or readiness) durably.
	Add(PeerInfo) error
	// Rejoined clears the removal mark of a cluster joining again.
	Rejoined(id string) error
	// Contact records the outcome of a call to a peer.
	Contact(id string, err error)
	// Healthy says whether a peer answered lately and finished its copy.
	Healthy(id string) bool
	// Dial returns a client for a peer.
	Dial(id string) (Peer, error)
}

// PullRequest is one pull: who asks and where each table's records resume.
type PullRequest struct {
	Cluster string
	Addr    string
	Wait    time.Duration
	Limit   int
	// Positions maps TableKey(instance, table) to the last applied position.
	Positions map[string]changestream.Position
}

// PullResponse is a peer's answer to a pull.
type PullResponse struct {
	Cluster string
	// Closed is the peer's closed timestamp when it answered.
	Closed       int64
	Tables       []PulledTable
	Catalog      []TableSchema
	Dropped      []table.DroppedTable
	Peers        []PeerInfo
	InstanceMeta []MetaEntry
	AgeCutoffs   map[FamilyKey]int64
	// Shipped is how many records the answer carries.
	Shipped int
}

// PulledTable is one table's records in a pull answer.
type PulledTable struct {
	Instance, Table string
	// Records carry their positions.
	Records []changestream.Record
	// Through is where the next pull of the table resumes.
	Through changestream.Position
	// Full says the answer stopped at its budget: ask again at once.
	Full bool
}

// MetaEntry is one entry of a cluster's instance metadata (clusters and app
// profiles) as it travels with pulls.
type MetaEntry struct {
	Kind, Instance, Name, Value string
}

// FamilyKey names a column family of a table of an instance.
type FamilyKey struct{ Instance, Table, Family string }

// JoinRequest registers a joining cluster.
type JoinRequest struct{ Cluster, Addr string }

// JoinResponse names the seed and the peers it knows.
type JoinResponse struct {
	Cluster, Addr string
	Peers         []PeerInfo
}

// SnapshotItem is one piece of a snapshot: a table's schema, a run of its
// cells or tombstones, a checkpoint, or the end.
type SnapshotItem struct {
	Kind SnapshotKind
	// Meta is the table's schema (Kind SnapshotTable) or names the table.
	Meta     *table.Meta
	Pairs    [][2][]byte
	Origin   string
	Position changestream.Position
	// Closed is the seed's closed timestamp (Kind SnapshotEnd).
	Closed int64
}

// SnapshotKind says what a SnapshotItem holds.
type SnapshotKind int

const (
	SnapshotTable SnapshotKind = iota
	SnapshotCells
	SnapshotTombstones
	SnapshotCheckpoint
	SnapshotEnd
)

// TableKey is the key of a table in PullRequest.Positions.
func TableKey(instance, name string) string { return instance + "\x00" + name }
