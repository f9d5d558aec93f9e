package table

import (
	"context"
	"errors"
	"testing"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/gcrule"
)

// A table created with microsecond granularity (Bigtable's MICROS) keeps
// sub-millisecond timestamps; a default (MILLIS) table refuses them.
func TestMicrosGranularity(t *testing.T) {
	e, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	fams := []FamilySpec{{Name: "cf", GC: gcrule.MustParse("never")}}
	if _, err := e.CreateTable(testInst, "micros", TableSpec{Families: fams, Micros: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateTable(testInst, "millis", TableSpec{Families: fams}); err != nil {
		t.Fatal(err)
	}
	const ts = 3023483279876543
	set := []Mutation{{Kind: SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: ts, Value: []byte("v")}}
	if err := e.MutateRow(testInst, "millis", []byte("r"), set); !errors.Is(err, ErrInvalid) {
		t.Fatalf("MILLIS table took a microsecond timestamp: %v", err)
	}
	if err := e.MutateRow(testInst, "micros", []byte("r"), set); err != nil {
		t.Fatal(err)
	}
	del := []Mutation{{Kind: DeleteFromColumn, Family: "cf", Qualifier: []byte("q"), StartTS: ts + 1, EndTS: ts + 2}}
	if err := e.MutateRow(testInst, "micros", []byte("r"), del); err != nil {
		t.Fatalf("microsecond delete range: %v", err)
	}
	var got []int64
	if err := e.ReadRows(context.Background(), testInst, "micros", ReadRequest{}, func(r cell.Row) error {
		for _, c := range r.Cells {
			got = append(got, c.Timestamp)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != ts {
		t.Fatalf("read %v, want [%d]", got, ts)
	}
	if m, _ := e.Table(testInst, "micros"); !m.Micros {
		t.Fatal("granularity not recorded")
	}
}
