package console

import (
	"context"
	"time"

	"github.com/ebbtable/ebbtable/backup"
	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/collector"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/rowttl"
	"github.com/ebbtable/ebbtable/table"
)

// The console's view of the server: each interface lists only the methods
// the console calls (the server passes its engine, collector, row deletion
// job and backup manager, which satisfy them).

// Engine is what the console reads of the table engine.
type Engine interface {
	Tables(instance string) []*table.Meta
	Table(instance, name string) (*table.Meta, error)
	ReadRows(ctx context.Context, instance, name string, req table.ReadRequest, fn func(cell.Row) error) error
	RawCells(m *table.Meta, start, end []byte, fn func(table.RawCell) error) error
	ReadChanges(m *table.Meta, lower []byte, limit int) (table.ChangeBatch, error)
	DiskUsage(m *table.Meta) (uint64, error)
	Visibility() table.Visibility
}

// Collector is what the console reads of the garbage collector, and the
// one action it may take (a pass, with Options.Writes).
type Collector interface {
	Status(instance string) ([]collector.TableStatus, collector.PassStats)
	AgeCutoffs(instance string) ([]collector.AgeCutoff, error)
	Plan(ctx context.Context, instance, name, family string, rule gcrule.Rule) (collector.PlanResult, error)
	Interval() time.Duration
	NextPass() time.Time
	RunPass(ctx context.Context, sel collector.Selector) (collector.PassStats, error)
}

// RowTTL is what the console reads of the row deletion job, and the one
// action it may take (a run, with Options.Writes).
type RowTTL interface {
	Status(instance string) []rowttl.TableStatus
	Plan(ctx context.Context, instance, name string, pol rowttl.Policy) (rowttl.PlanResult, error)
	Interval() time.Duration
	NextRun() time.Time
	Run(ctx context.Context, sel rowttl.Selector) (rowttl.RunStats, error)
}

// Backups lists backups.
type Backups interface {
	List(instance, cluster string) []*backup.Manifest
}

// Replication is the replication state the server reports: this
// cluster and its peers, with each peer's checkpoint for table m (nil m:
// no checkpoints).
type Replication func(m *table.Meta) ReplicationState

// ReplicationState is this cluster's view of replication.
type ReplicationState struct {
	Cluster string
	// Closed: every local commit at or before it is readable by peers.
	Closed time.Time
	Peers  []Peer
}

// Peer is one other cluster of the instance.
type Peer struct {
	ID, Addr               string
	Ready, Healthy, Paused bool
	// MaxDelay is how far behind the peer's data reaching this cluster
	// is (HasDelay false: not measured yet).
	MaxDelay time.Duration
	HasDelay bool
	// Applied is the commit time through which this cluster has applied
	// the peer's changes to the table asked about (zero: none yet).
	Applied time.Time
}
