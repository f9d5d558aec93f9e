package table_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/table"
)

// BenchmarkPointReadRandom reads random rows of one 100-byte cell out of
// 200,000 written in batches of 100 consecutive rows (ebbbench's shape),
// from the memtable and after a flush: the engine's share of ebbbench's
// point reads, without gRPC.
//
//	go test -run '^$' -bench PointReadRandom -benchmem ./table
//
// cpu-µs/op is the process's CPU time a read (Pebble's background work
// included). memtable-transient reads as the server does
// (ReadRequest.Transient: the rows are carved from the pooled iterator's
// scratch).
func BenchmarkPointReadRandom(b *testing.B) {
	for _, c := range []struct {
		name               string
		flushed, transient bool
	}{{"memtable", false, false}, {"memtable-transient", false, true}, {"flushed", true, false}} {
		flushed := c.flushed
		b.Run(c.name, func(b *testing.B) {
			clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			eng, err := table.Open(table.Options{Dir: b.TempDir(), Clock: clk})
			if err != nil {
				b.Fatal(err)
			}
			defer eng.Close()
			const inst, rows = "projects/p/instances/i", 200_000
			if _, err := eng.CreateTable(inst, "t", table.TableSpec{Families: []table.FamilySpec{{Name: "cf", GC: gcrule.MustParse("maxversions=1")}}}); err != nil {
				b.Fatal(err)
			}
			now := clock.MillisTruncated(clk.Now())
			keys := make([][]byte, rows)
			for r := range keys {
				keys[r] = []byte(fmt.Sprintf("user%012d", r))
			}
			for r := 0; r < rows; r += 100 {
				batch := make([]table.RowMutation, 0, 100)
				for _, k := range keys[r : r+100] {
					batch = append(batch, table.RowMutation{Row: k, Mutations: []table.Mutation{{Kind: table.SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: now, Value: make([]byte, 100)}}})
				}
				if _, err := eng.MutateRows(inst, "t", batch); err != nil {
					b.Fatal(err)
				}
			}
			if flushed {
				if err := eng.Flush(); err != nil {
					b.Fatal(err)
				}
			}
			rng := rand.New(rand.NewPCG(1, 2))
			order := make([]int, 1<<16)
			for i := range order {
				order[i] = rng.IntN(rows)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			for i := 0; i < b.N; i++ {
				n := 0
				k := keys[order[i%len(order)]]
				err := eng.ReadRows(context.Background(), inst, "t", table.ReadRequest{Keys: [][]byte{k}, Transient: c.transient}, func(r cell.Row) error {
					n += len(r.Cells)
					return nil
				})
				if err != nil || n != 1 {
					b.Fatalf("read %d cells: %v", n, err)
				}
			}
			// The process's CPU time, steadier than wall time on a
			// loaded machine (time waiting for a core is not counted).
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/1e3, "cpu-µs/op")
		})
	}
}
