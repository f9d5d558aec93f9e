package table

import (
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/storage"
)

// A replica's snapshot import (ImportPairs) logs the rows whose cells it
// brings for a view-logged table, once per row, so a maintained view over
// the table sees them; tombstones, which no read sees, are not logged.
func TestImportPairsLogsRows(t *testing.T) {
	e, err := Open(Options{Dir: t.TempDir(), Clock: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	m, err := e.CreateTable(testInst, "t", TableSpec{Families: []FamilySpec{{Name: "cf", GC: gcrule.MustParse("never")}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetViewLogged(m.ID, true); err != nil {
		t.Fatal(err)
	}
	fam := m.Families[0].ID
	val := storage.EncodeValue([]byte("v"), 0)
	pairs := [][2][]byte{
		{storage.CellKey(m.ID, []byte("a"), fam, []byte("q"), 2000), val},
		{storage.CellKey(m.ID, []byte("a"), fam, []byte("r"), 1000), val},
		{storage.CellKey(m.ID, []byte("b"), fam, []byte("q"), 1000), val},
	}
	if err := e.ImportPairs(m, ExportCells, pairs); err != nil {
		t.Fatal(err)
	}
	entries, _, err := e.ReadViewLog(m.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, en := range entries {
		if en.Kind != ViewLogRow {
			t.Fatalf("entry of kind %d, want a row", en.Kind)
		}
		got = append(got, string(en.Row))
	}
	if len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("logged rows %q, want a and b", got)
	}
}
