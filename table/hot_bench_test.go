package table_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/table"
)

// BenchmarkHotRows is ebbbench's hot-row workload (issue 16) on the engine
// alone, no gRPC: 50 goroutines, half point reads and half durable 1 KiB
// SetCells at server time, on 100 rows of a maxversions=1 family, the
// engine opened as serve opens it (one full-size memtable), with no
// collector (a 16 s ebbbench run's pile visits reach a hot row about once).
// One op is one read or one write; cpu-µs/op is the process's CPU time
// (user and system, every thread, flushes included) per op. b.N sets how
// far the memtable grows: 20,000 ops is about a 2 s ebbbench run's worth,
// 100,000 a 16 s run's.
//
//	go test -run '^$' -bench HotRows -benchtime 100000x -count 3 ./table
func BenchmarkHotRows(b *testing.B) {
	const (
		workers = 50
		rows    = 100
		inst    = "projects/p/instances/i"
	)
	eng, err := table.Open(table.Options{Dir: b.TempDir(), FullMemtable: true})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	if _, err := eng.CreateTable(inst, "t", table.TableSpec{Families: []table.FamilySpec{{Name: "f", GC: gcrule.MustParse("maxversions=1")}}}); err != nil {
		b.Fatal(err)
	}
	value := make([]byte, 1<<10)
	for i := range value {
		value[i] = byte(i * 7)
	}
	keys := make([][]byte, rows)
	set := func(i int) error {
		return eng.MutateRow(inst, "t", keys[i], []table.Mutation{{Kind: table.SetCell, Family: "f", Qualifier: []byte("c"), Timestamp: table.ServerTimestamp, Value: value}})
	}
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "row%04d", i)
		if err := set(i); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	b.ResetTimer()
	start, cpu := time.Now(), processCPU()
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(1, uint64(w)+1))
			for next.Add(1) <= int64(b.N) {
				i := rng.IntN(rows)
				if rng.IntN(2) == 0 {
					n := 0
					err := eng.ReadRows(context.Background(), inst, "t", table.ReadRequest{Keys: keys[i : i+1]}, func(r cell.Row) error {
						n += len(r.Cells)
						return nil
					})
					if err == nil && n != 1 {
						err = fmt.Errorf("read %d cells of row %s, want 1", n, keys[i])
					}
					if err != nil {
						errs <- err
						return
					}
				} else if err := set(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	endWorkers(b, errs, start, cpu, "op")
}
