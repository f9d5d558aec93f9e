package replication

import (
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
)

// Engine is the part of table.Engine replication uses (a consumer-side
// interface, as etcd's compactor declares its own).
type Engine interface {
	Tables(instance string) []*table.Meta
	Table(instance, name string) (*table.Meta, error)
	CreateTable(instance, name string, spec table.TableSpec) (*table.Meta, error)
	DeleteTableAt(instance, name string, st storage.Stamp) error
	ModifyFamiliesAt(instance, name string, mods []table.FamilyMod, st storage.Stamp) (*table.Meta, error)
	DroppedTables() ([]table.DroppedTable, error)

	Checkpoint(m *table.Meta, origin string) (changestream.Position, bool, error)
	ApplyReplicated(m *table.Meta, origin string, recs []changestream.Record, through changestream.Position) (table.ReplicaStats, error)
	ReadChangesUntil(m *table.Meta, lower []byte, closed int64, limit int) (table.ChangeBatch, error)
	ChangesNotify() <-chan struct{}
	ClosedTimestamp() int64
	TrimTombstones(below int64) (int, error)
	Replicating() (string, bool)
	SetReplicating(cluster string) error

	// The join: its durable progress, the copy out and in.
	InstanceMeta(kind, instance string, fn func(instance, name string, value []byte) error) error
	PutInstanceMeta(kind, instance, name string, value []byte) error
	DeleteInstanceMeta(kind, instance, name string) error
	DeleteTable(instance, name string) error
	Export(fn func(table.ExportItem) error) (closed int64, err error)
	ImportTable(peer *table.Meta) (*table.Meta, error)
	ImportPairs(m *table.Meta, kind table.ExportKind, pairs [][2][]byte) error
	SetCheckpoint(m *table.Meta, origin string, p changestream.Position) error
}

var _ Engine = (*table.Engine)(nil)

// Sink is the part of Engine a puller applies a peer's answers to: the
// schema changes, the records and the checkpoints.
type Sink interface {
	Tables(instance string) []*table.Meta
	Table(instance, name string) (*table.Meta, error)
	CreateTable(instance, name string, spec table.TableSpec) (*table.Meta, error)
	DeleteTableAt(instance, name string, st storage.Stamp) error
	ModifyFamiliesAt(instance, name string, mods []table.FamilyMod, st storage.Stamp) (*table.Meta, error)
	DroppedTables() ([]table.DroppedTable, error)
	Checkpoint(m *table.Meta, origin string) (changestream.Position, bool, error)
	ApplyReplicated(m *table.Meta, origin string, recs []changestream.Record, through changestream.Position) (table.ReplicaStats, error)
	TrimTombstones(below int64) (int, error)
}

var _ Sink = Engine(nil)
