package table_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
)

// BenchmarkSyncedWrites measures durable bulk writes through the engine
// beside raw Pebble writing the same cells, with no gRPC in the way: 8
// writers, synced batches of 100 rows of one 100-byte cell at random keys
// (the shape of ebbbench's writes workload). One op is one row.
//
//   - engine: table.Engine.MutateRows, the server's write path below gRPC
//     (validation, key encoding, row locks, durability tickets, commit);
//   - pebble: the same keys and encoded values in pebble.Batch commits
//     with pebble.Sync on a database storage.Open opened with ebbtable's
//     Pebble options: the most the engine could reach on this disk.
//
// Both open with one full-size memtable, as serve does (FullMemtable).
//
// The engine/pebble ratio of rows/s is the engine's share of raw Pebble's
// synced-batch throughput; cpu-µs/row is the process's CPU time (user and
// system, every thread) per row:
//
//	go test -run '^$' -bench SyncedWrites -benchtime 200000x -count 3 ./table
func BenchmarkSyncedWrites(b *testing.B) {
	const (
		writers   = 8
		batchRows = 100
		valueSize = 100
		inst      = "projects/p/instances/i"
	)
	value, ts := benchValue(valueSize), benchTS
	// run splits b.N rows into batches taken by writers goroutines.
	run := func(b *testing.B, write func(first, n int) error) {
		batches := (b.N + batchRows - 1) / batchRows
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		b.ResetTimer()
		start, cpu := time.Now(), processCPU()
		for range writers {
			wg.Go(func() {
				for {
					i := int(next.Add(1) - 1)
					if i >= batches {
						return
					}
					first := i * batchRows
					if err := write(first, min(batchRows, b.N-first)); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		endWorkers(b, errs, start, cpu, "row")
	}

	b.Run("engine", func(b *testing.B) {
		eng := openBenchEngine(b, inst)
		run(b, func(first, n int) error {
			entries := make([]table.RowMutation, n)
			for i := range entries {
				entries[i] = table.RowMutation{Row: benchRowKey(nil, first+i), Mutations: []table.Mutation{
					{Kind: table.SetCell, Family: "f", Qualifier: []byte("c"), Timestamp: ts, Value: value}}}
			}
			errs, err := eng.MutateRows(inst, "t", entries)
			if err != nil {
				return err
			}
			for _, e := range errs {
				if e != nil {
					return e
				}
			}
			return nil
		})
	})

	b.Run("pebble", func(b *testing.B) {
		db, err := storage.Open(storage.Options{Dir: b.TempDir(), FullMemtable: true})
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		enc := storage.EncodeValue(value, 0)
		run(b, func(first, n int) error {
			batch := db.NewBatch()
			defer batch.Close()
			var row []byte
			for i := range n {
				row = benchRowKey(row[:0], first+i)
				if err := batch.Set(storage.CellKey(1, row, 1, []byte("c"), ts), enc, nil); err != nil {
					return err
				}
			}
			return batch.Commit(pebble.Sync)
		})
	})
}

// BenchmarkSyncedPointWrites measures single-row writes through the engine,
// ebbbench's point-writes workload below gRPC: 8 writers, each write a
// synced one-entry MutateRows (the server's MutateRow path) of one 100-byte
// SetCell to a new row, at one client timestamp, into a database whose
// memtable already holds the rows of a bulk load (ebbbench writes 200,000
// first). The writes alternate, in slices of 800 with each arm first in
// every other pair, between looking up that the cell is new (as while point
// reads come) and not (newCellLookups); one op is one write, and each arm
// reports its writes a second and the process's CPU per write:
//
//	go test -run '^$' -bench SyncedPointWrites -benchtime 16000x -count 3 ./table
func BenchmarkSyncedPointWrites(b *testing.B) {
	const (
		writers   = 8
		valueSize = 100
		prefill   = 200000
		slice     = 800
		inst      = "projects/p/instances/i"
	)
	value, ts := benchValue(valueSize), benchTS
	cell := func(row int) table.RowMutation {
		return table.RowMutation{Row: benchRowKey(nil, row), Mutations: []table.Mutation{
			{Kind: table.SetCell, Family: "f", Qualifier: []byte("c"), Timestamp: ts, Value: value}}}
	}
	eng := openBenchEngine(b, inst)
	for first := 0; first < prefill; first += 1000 {
		entries := make([]table.RowMutation, 0, 1000)
		for i := first; i < min(first+1000, prefill); i++ {
			entries = append(entries, cell(i))
		}
		if _, err := eng.MutateRows(inst, "t", entries); err != nil {
			b.Fatal(err)
		}
	}
	next := prefill
	// write makes n writes with lookups on or off and returns their wall
	// and CPU time.
	write := func(n int, look bool) (wall, cpu time.Duration) {
		table.HoldNewCellLookups(eng, look)
		first := next
		next += n
		var i atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		start, cpu0 := time.Now(), processCPU()
		for range writers {
			wg.Go(func() {
				for {
					k := int(i.Add(1) - 1)
					if k >= n {
						return
					}
					// MutateRowsFrom, as the server's MutateRow.
					es, err := eng.MutateRows(inst, "t", []table.RowMutation{cell(first + k)})
					if err == nil {
						err = es[0]
					}
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		wall, cpu = time.Since(start), processCPU()-cpu0
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
		return wall, cpu
	}
	var n [2]int
	var wall, cpu [2]time.Duration
	b.ResetTimer()
	for done, pair := 0, 0; done < b.N; pair++ {
		for k := range 2 {
			arm := (k + pair) % 2 // 0: looking, 1: not; each first in turn
			m := min(slice, b.N-done)
			if m == 0 {
				break
			}
			w, c := write(m, arm == 0)
			n[arm] += m
			wall[arm] += w
			cpu[arm] += c
			done += m
		}
	}
	b.StopTimer()
	for arm, name := range []string{"look", "nolook"} {
		if n[arm] > 0 {
			b.ReportMetric(float64(n[arm])/wall[arm].Seconds(), name+"-writes/s")
			b.ReportMetric(float64(cpu[arm].Microseconds())/float64(n[arm]), name+"-cpu-µs/write")
		}
	}
}

// endWorkers ends a benchmark whose workers have returned: it fails on the
// first error they sent on errs, then reports b.N units a second and the
// process's CPU per unit since start and cpu (processCPU's reading then).
func endWorkers(b *testing.B, errs chan error, start time.Time, cpu time.Duration, unit string) {
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), unit+"s/s")
	b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/"+unit)
}

// The write benchmarks' cells: row keys spread by a multiplicative hash of
// the row's number, one client timestamp, and a value of a fixed pattern.
var benchTS = clock.MillisTruncated(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

func benchRowKey(dst []byte, i int) []byte {
	x := uint64(i) * 0x9e3779b97f4a7c15
	x ^= x >> 31
	return fmt.Appendf(dst, "r%016x", x)
}

func benchValue(n int) []byte {
	v := make([]byte, n)
	for i := range v {
		v[i] = byte(i * 7)
	}
	return v
}

// openBenchEngine opens an engine with one full-size memtable, as serve
// does, holding table "t" of family "f" in inst; it closes with b.
func openBenchEngine(b *testing.B, inst string) *table.Engine {
	eng, err := table.Open(table.Options{Dir: b.TempDir(), FullMemtable: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { eng.Close() })
	if _, err := eng.CreateTable(inst, "t", table.TableSpec{Families: []table.FamilySpec{{Name: "f"}}}); err != nil {
		b.Fatal(err)
	}
	return eng
}
