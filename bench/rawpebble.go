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
// disk could reach with Pebble. It runs only the writes workload; its
// CPU per row (this process's) is reported as its server CPU.
const TargetPebble = "pebble"

// rawPebbleWrites runs the writes workload's cells into a fresh Pebble
// database under a temporary directory, removed afterwards.
func rawPebbleWrites(ctx context.Context, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	dir, err := os.MkdirTemp("", "ebbbench-pebble-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	db, err := storage.Open(storage.Options{Dir: dir, FullMemtable: true})
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	pool := newValuePool(cfg)
	ts := time.Now().UnixMicro() / 1000 * 1000
	const tableID, familyID = 1, 1
	qual := []byte(cfg.Column)
	batches := (cfg.Rows + cfg.BatchSize - 1) / cfg.BatchSize
	workers := min(cfg.Workers, max(batches, 1))
	cpu0 := processCPU()
	res, err := runWorkers(ctx, WorkloadWrites, workers, func(ctx context.Context, w int, rec *recorder) error {
		lo, hi := share(batches, workers, w)
		var row, key, val []byte
		for b := lo; b < hi; b++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			first := b * cfg.BatchSize
			last := min(first+cfg.BatchSize, cfg.Rows)
			t0 := time.Now()
			batch := db.NewBatch()
			for i := first; i < last; i++ {
				r := cfg.FirstRow + i
				row = cfg.appendKey(row[:0], r)
				key = storage.AppendCellKey(key[:0], tableID, row, familyID, qual, ts)
				val = append(append(val[:0], 0), pool.value(r)...) // storage.EncodeValue(value, 0)
				if err := batch.Set(key, val, nil); err != nil {
					batch.Close()
					return err
				}
			}
			err := storage.CommitSynced(batch)
			batch.Close()
			if err != nil {
				return err
			}
			rec.record(time.Since(t0), int64(last-first))
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	res.Target = TargetPebble
	// The store is in this process: its CPU is the "server's".
	res.setServerCPU(processCPU() - cpu0)
	return res, nil
}
