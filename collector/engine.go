package collector

import (
	"context"
	"time"

	"github.com/ebbtable/ebbtable/storage"

	"github.com/ebbtable/ebbtable/changestream"

	"github.com/ebbtable/ebbtable/table"
)

// Engine is what the collector needs from the engine (a *table.Engine):
// the tables, raw iteration and deletion under the rows' locks, the GC
// agenda and age cutoffs, change-stream trimming, and space reclaim.
type Engine interface {
	Tables(instance string) []*table.Meta
	Table(instance, name string) (*table.Meta, error)
	Visibility() table.Visibility
	Replicating() (string, bool)
	Streaming(tableID uint64) bool
	GCGeneration(id uint64) uint64
	ForgetDropped(instance, name string, ids []uint32) error
	SetPileHook(h table.PileHook)

	LockRows(tableID uint64, rows [][]byte) func()
	RowPending(tableID uint64, row, prefix []byte) bool
	RawIter(lower, upper []byte) (*table.RawIter, error)
	RawIterTimestamps(lower, upper []byte, lo, hi int64) (*table.RawIter, error)
	RawGet(k []byte, fn func(v []byte)) (bool, error)
	NewDeleteBatch() *table.DeleteBatch
	CommitSystem(b *table.DeleteBatch, m *table.Meta, rows [][]byte, recs []changestream.Record, sync bool) error
	SyncWAL() error

	AgendaDue(m *table.Meta, upTo int64, fn func(table.AgendaEntry) bool) error
	AgendaCounts(m *table.Meta, now int64, limit int) (due, later int, err error)
	SettleAgenda(m *table.Meta, before int64) error
	AgeCutoff(m *table.Meta, familyID uint32) (int64, bool, error)
	SetAgeCutoff(m *table.Meta, familyID uint32, cutoff int64) error
	TrimChanges(m *table.Meta, cutoff int64) (int64, error)

	EstimateDiskUsage(lo, hi []byte) (uint64, error)
	Settle(ctx context.Context, max time.Duration) (storage.Settled, error)
	CompactPaced(ctx context.Context, start, end []byte, bytesPerSec int64) error
}
