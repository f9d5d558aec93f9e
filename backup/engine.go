package backup

import (
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/table"
)

// SSTs is what the backup files need from the engine: SSTables it can read
// back and ingest.
type SSTs interface {
	CreateSST(path string) (*table.SSTWriter, error)
	OpenSSTs(paths []string) (*table.RawIter, error)
}

// Engine is what backups and restores need from the engine (a
// *table.Engine): its clock, a consistent image of a table, SSTables, and the
// restore that ingests them.
type Engine interface {
	SSTs
	Clock() clock.Clock
	SnapshotTable(instance, name string) (*table.TableSnapshot, error)
	BeginRestore(instance, name string) (*table.Restoring, error)
}
