package table_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/filter"
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
	if err := eng.Flush(); err != nil {
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

// BenchmarkPointReadHidden reads single rows of one maxversions=1 column
// holding one version ("single") or one visible and 10,000 hidden,
// not-yet-collected versions ("hidden10k"), from the memtable and after a
// flush: the hidden versions should cost a seek, not a walk (at most 2× the
// single version). Both stores hold the same data — "single" has as many
// hidden versions in rows it does not read — so the comparison is of the
// versions in the row read, not of the size of the store.
//
//	go test -run '^$' -bench PointReadHidden -benchmem ./table
func BenchmarkPointReadHidden(b *testing.B) {
	const rows, hidden = 10, 10_000
	for _, readHidden := range []bool{false, true} {
		for _, flushed := range []bool{false, true} {
			name := fmt.Sprintf("single/memtable=%v", !flushed)
			if readHidden {
				name = fmt.Sprintf("hidden%dk/memtable=%v", hidden/1000, !flushed)
			}
			b.Run(name, func(b *testing.B) {
				eng, clk := openSkipTable(b, map[string]string{"cf": "maxversions=1"})
				now := clock.MillisTruncated(clk.Now())
				keys := make([][]byte, rows)
				for r := range keys {
					many, one := fmt.Sprintf("row%07d", r), fmt.Sprintf("row%07d-one", r)
					writeVersions(b, eng, many, "cf", "q", now, 1+hidden)
					writeVersions(b, eng, one, "cf", "q", now, 1)
					keys[r] = []byte(one)
					if readHidden {
						keys[r] = []byte(many)
					}
				}
				if flushed {
					if err := eng.Flush(); err != nil {
						b.Fatal(err)
					}
				}
				var st table.ReadStats // summed over the reads
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					n := 0
					err := eng.ReadRows(context.Background(), skipInst, "t", table.ReadRequest{Keys: keys[i%rows : i%rows+1], Stats: &st}, func(r cell.Row) error {
						n += len(r.Cells)
						return nil
					})
					if err != nil || n != 1 {
						b.Fatalf("read %d cells: %v", n, err)
					}
				}
				b.ReportMetric(float64(st.CellsSeen)/float64(b.N), "cells-seen/op")
			})
		}
	}
}

// BenchmarkColumnLimit100k reads a row whose one column holds 100,000
// versions under a never rule, with CellsPerColumnLimit(1): the limit is
// applied while streaming, so the read steps on a handful of cells.
//
//	go test -run '^$' -bench ColumnLimit100k -benchmem ./table
func BenchmarkColumnLimit100k(b *testing.B) {
	eng, clk := openSkipTable(b, map[string]string{"cf": "never"})
	now := clock.MillisTruncated(clk.Now())
	writeVersions(b, eng, "r", "cf", "q", now, 100_000)
	if err := eng.Flush(); err != nil {
		b.Fatal(err)
	}
	p := compile(b, filter.CellsPerColumnLimit(1))
	var st table.ReadStats // summed over the reads
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := 0
		err := eng.ReadRows(context.Background(), skipInst, "t", table.ReadRequest{Keys: [][]byte{[]byte("r")}, Filter: p, Stats: &st}, func(r cell.Row) error {
			n += len(r.Cells)
			return nil
		})
		if err != nil || n != 1 {
			b.Fatalf("read %d cells: %v", n, err)
		}
	}
	b.ReportMetric(float64(st.CellsSeen)/float64(b.N), "cells-seen/op")
}
