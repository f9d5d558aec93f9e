package table_test

import (
	"fmt"
	"testing"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/table"
)

// TestHotColumnStepsOnce: once a read left a column's hidden tail with a
// seek, the next read of it steps over one hidden version before seeking,
// not three; a column that then ends within its step is forgotten, and
// its next long tail is stepped over three times again. What the reads
// return never changes.
func TestHotColumnStepsOnce(t *testing.T) {
	eng, clk := openSkipTable(t, map[string]string{"one": "maxversions=1", "keep": "never"})
	now := clock.MillisTruncated(clk.Now())
	writeVersions(t, eng, "r", "one", "a", now, 40)
	if err := eng.MutateRow(skipInst, "t", []byte("r"), []table.Mutation{set("keep", "z", now, "k")}); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint([]string{"r/keep:z@" + fmt.Sprint(now) + "=k", "r/one:a@" + fmt.Sprint(now) + "=v0"})
	read := func(wantSeen int64) {
		t.Helper()
		got, st := readStats(t, eng, table.ReadRequest{Keys: [][]byte{[]byte("r")}})
		if fmt.Sprint(got) != want {
			t.Fatalf("read %v, want %s", got, want)
		}
		// keep:z and one:a, plus the steps over one:a's hidden tail.
		if st.CellsSeen != wantSeen {
			t.Fatalf("%d cells seen, want %d", st.CellsSeen, wantSeen)
		}
	}
	read(2 + 3) // three steps, then the seek
	read(2 + 1) // hot: one step
	read(2 + 1)
	// Collected down to one version, the column ends within the step,
	// and it is forgotten.
	if err := eng.MutateRow(skipInst, "t", []byte("r"), []table.Mutation{{Kind: table.DeleteFromColumn, Family: "one", Qualifier: []byte("a")}}); err != nil {
		t.Fatal(err)
	}
	writeVersions(t, eng, "r", "one", "a", now, 1)
	read(2)
	writeVersions(t, eng, "r", "one", "a", now, 40)
	read(2 + 3)
	read(2 + 1)
}
