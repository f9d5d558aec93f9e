package table_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/table"
)

// BenchmarkPointRead reads single rows of ten versions of one column from
// the engine, with no gRPC in the way: the server's share of a point read.
//
//	go test -run '^$' -bench PointRead -benchmem ./table
func BenchmarkPointRead(b *testing.B) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	eng, err := table.Open(table.Options{Dir: b.TempDir(), Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	const inst, rows = "projects/p/instances/i", 10_000
	if _, err := eng.CreateTable(inst, "t", table.TableSpec{Families: []table.FamilySpec{{Name: "cf", GC: gcrule.MustParse("maxversions=20")}}}); err != nil {
		b.Fatal(err)
	}
	now := clock.MillisTruncated(clk.Now())
	var batch []table.RowMutation
	for r := 0; r < rows; r++ {
		var muts []table.Mutation
		for v := 0; v < 10; v++ {
			muts = append(muts, table.Mutation{Kind: table.SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: now - int64(v)*1000, Value: make([]byte, 64)})
		}
		batch = append(batch, table.RowMutation{Row: []byte(fmt.Sprintf("row%07d", r)), Mutations: muts})
	}
	if _, err := eng.MutateRows(inst, "t", batch); err != nil {
		b.Fatal(err)
	}
	if err := eng.Store().Flush(); err != nil {
		b.Fatal(err)
	}
	keys := make([][]byte, rows)
	for r := range keys {
		keys[r] = []byte(fmt.Sprintf("row%07d", r))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := 0
		err := eng.ReadRows(context.Background(), inst, "t", table.ReadRequest{Keys: keys[i%rows : i%rows+1]}, func(r cell.Row) error {
			n += len(r.Cells)
			return nil
		})
		if err != nil || n != 10 {
			b.Fatalf("read %d cells: %v", n, err)
		}
	}
}
