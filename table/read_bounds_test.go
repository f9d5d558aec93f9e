package table

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/clock"
)

func openPlain(t *testing.T) *Engine {
	t.Helper()
	e, err := Open(Options{Dir: t.TempDir(), Clock: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if _, err := e.CreateTable(testInst, "t", TableSpec{Families: []FamilySpec{{Name: "cf"}}}); err != nil {
		t.Fatal(err)
	}
	return e
}

// versions writes n versions of one column of row r.
func versions(t *testing.T, e *Engine, r string, n int) {
	t.Helper()
	for done := 0; done < n; {
		var muts []Mutation
		for ; done < n && len(muts) < 10000; done++ {
			muts = append(muts, Mutation{Kind: SetCell, Family: "cf", Qualifier: []byte("c"), Timestamp: int64(done+1) * 1000, Value: []byte("v")})
		}
		if err := e.MutateRow(testInst, "t", []byte(r), muts); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReadCancelledInsideALongRow: a read looks at its context inside a row,
// not only between rows.
func TestReadCancelledInsideALongRow(t *testing.T) {
	e := openPlain(t)
	versions(t, e, "long", 5000)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stats ReadStats
	err := e.ReadRows(ctx, testInst, "t", ReadRequest{Stats: &stats}, func(cell.Row) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled read: %v", err)
	}
	if stats.CellsSeen > 2*ctxEvery {
		t.Errorf("the cancelled read stepped on %d of 5000 cells", stats.CellsSeen)
	}
}

// TestRowTooLarge: a row selecting more than MaxRowBytes fails with
// ErrRowTooLarge (a failed precondition) that says how to read it in parts,
// forward and backward; a narrower read of the same row works.
func TestRowTooLarge(t *testing.T) {
	e := openPlain(t)
	big := strings.Repeat("x", 400<<10)
	for i := range 3 {
		if err := e.MutateRow(testInst, "t", []byte("big"), []Mutation{{Kind: SetCell, Family: "cf", Qualifier: []byte(fmt.Sprint("c", i)), Timestamp: 1000, Value: []byte(big)}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, reversed := range []bool{false, true} {
		err := e.ReadRows(context.Background(), testInst, "t", ReadRequest{MaxRowBytes: 1 << 20, Reversed: reversed}, func(cell.Row) error { return nil })
		if !errors.Is(err, ErrRowTooLarge) || !errors.Is(err, ErrPrecondition) || !strings.Contains(err.Error(), "read it in parts") {
			t.Errorf("reversed=%v: %v", reversed, err)
		}
	}
	n := 0
	if err := e.ReadRows(context.Background(), testInst, "t", ReadRequest{}, func(r cell.Row) error { n += len(r.Cells); return nil }); err != nil || n != 3 {
		t.Fatalf("the default bound (256 MiB): %d cells, %v", n, err)
	}
}
