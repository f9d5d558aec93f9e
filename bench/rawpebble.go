package bench

import (
	"context"
	"os"
	"time"

	"github.com/ebbtable/ebbtable/storage"
)

// TargetPebble is raw Pebble, opened with ebbtable's options
// (storage.Open, one full-size first memtable as serve has), written the
// writes workload's cells directly from this process: the same row keys,
// values and timestamp encoded as ebbtable encodes them, Workers
// goroutines each committing batches of BatchSize rows with pebble.Sync.
// No gRPC, no client, no server: the most any durable server on this
// disk could reach with Pebble. It runs the writes workload and, with
// PointWrites, single-cell synced commits of the point-writes workload's
// cells (no scans or reads); its CPU per row (this process's) is
// reported as its server CPU.
const TargetPebble = "pebble"

// rawPebbleWrites runs the writes workload's cells into a fresh Pebble
// database under a temporary directory, removed afterwards, and then, if
// cfg.PointWrites > 0, the point-writes workload's: one cell per synced
// commit, to new rows (the rows PointWrites writes), from Workers
// goroutines. Each result's CPU per row is this process's.
func rawPebbleWrites(ctx context.Context, cfg Config) ([]Result, error) {
	cfg = cfg.withDefaults()
	dir, err := os.MkdirTemp("", "ebbbench-pebble-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	db, err := storage.Open(storage.Options{Dir: dir, FullMemtable: true})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	pool := newValuePool(cfg)
	ts := time.Now().UnixMicro() / 1000 * 1000
	res, err := rawPebbleCommits(ctx, db, pool, cfg, WorkloadWrites, cfg.FirstRow, cfg.Rows, cfg.BatchSize, ts)
	if err != nil || cfg.PointWrites <= 0 {
		return []Result{res}, err
	}
	pw, err := rawPebbleCommits(ctx, db, pool, cfg, WorkloadPointWrites, cfg.FirstRow+cfg.Rows, cfg.PointWrites, 1, ts)
	return []Result{res, pw}, err
}

// rawPebbleCommits writes rows first..first+n-1 of cfg's cells to db,
// batch rows per synced commit, the batches split over Workers goroutines.
func rawPebbleCommits(ctx context.Context, db *storage.DB, pool *valuePool, cfg Config, workload string, first, n, batch int, ts int64) (Result, error) {
	const tableID, familyID = 1, 1
	qual := []byte(cfg.Column)
	batches := (n + batch - 1) / batch
	workers := min(cfg.Workers, max(batches, 1))
	load := loadAvg()
	cpu0 := processCPU()
	res, err := runWorkers(ctx, workload, workers, func(ctx context.Context, w int, rec *recorder) error {
		lo, hi := share(batches, workers, w)
		var row, key, val []byte
		for b := lo; b < hi; b++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			from := first + b*batch
			to := min(from+batch, first+n)
			t0 := time.Now()
			wb := db.NewBatch()
			for r := from; r < to; r++ {
				row = cfg.appendKey(row[:0], r)
				key = storage.AppendCellKey(key[:0], tableID, row, familyID, qual, ts)
				val = append(append(val[:0], 0), pool.value(r)...) // storage.EncodeValue(value, 0)
				if err := wb.Set(key, val, nil); err != nil {
					wb.Close()
					return err
				}
			}
			err := storage.CommitSynced(wb)
			wb.Close()
			if err != nil {
				return err
			}
			rec.record(time.Since(t0), int64(to-from))
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	res.Target, res.Load1 = TargetPebble, load
	// The store is in this process: its CPU is the "server's".
	res.setServerCPU(processCPU() - cpu0)
	return res, nil
}
