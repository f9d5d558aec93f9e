package table_test

import (
	"fmt"
	"slices"
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

// TestHotColumnSkipsExactly: a skip past a hot column's hidden tail, cold
// (three steps and a seek) or hot (one step and a seek), leaves exactly
// that column: the next column of the row, one whose
// qualifier starts with the hot one's, columns whose qualifiers end in
// 0xff and 0x00 bytes (their ends are where an off-by-one seek would land),
// the next family and the next row all come back, also once the hot column
// no longer holds a hidden tail (a stale hint), in the memtable and
// flushed.
func TestHotColumnSkipsExactly(t *testing.T) {
	for _, flushed := range []bool{false, true} {
		t.Run(fmt.Sprintf("flushed=%v", flushed), func(t *testing.T) {
			eng, clk := openSkipTable(t, map[string]string{"one": "maxversions=1", "two": "maxversions=1"})
			now := clock.MillisTruncated(clk.Now())
			quals := []string{"a", "a\xff", "a\x00", "a\xff\xff", "ab", "b"}
			for _, row := range []string{"r", "r\x00", "r\xff"} {
				for _, q := range quals {
					writeVersions(t, eng, row, "one", q, now, 20)
					writeVersions(t, eng, row, "two", q, now, 20)
				}
			}
			if flushed {
				if err := eng.Flush(); err != nil {
					t.Fatal(err)
				}
			}
			var want []string
			for _, row := range []string{"r", "r\x00", "r\xff"} {
				for _, fam := range []string{"one", "two"} {
					for _, q := range []string{"a", "a\x00", "a\xff", "a\xff\xff", "ab", "b"} {
						want = append(want, fmt.Sprintf("%s/%s:%s@%d=v0", row, fam, q, now))
					}
				}
			}
			slices.Sort(want)
			check := func(what string) int64 {
				t.Helper()
				got, st := readStats(t, eng, table.ReadRequest{})
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Fatalf("%s: read\n%q\nwant\n%q", what, got, want)
				}
				return st.CellsSeen
			}
			n := int64(len(want))
			// Cold, each column costs its visible version and three steps;
			// hot, its visible version and one step (a column whose hint
			// slot another took steps three times again).
			if seen := check("cold"); seen != 4*n {
				t.Fatalf("cold: %d cells seen, want %d", seen, 4*n)
			}
			if seen := check("hot"); seen < 2*n || seen > 3*n {
				t.Fatalf("hot: %d cells seen, want %d (a few more for shared slots)", seen, 2*n)
			}
			// Every column down to one version: the hints are stale, the
			// columns end within the step and are forgotten; nothing is lost.
			for _, row := range []string{"r", "r\x00", "r\xff"} {
				for _, q := range quals {
					for _, fam := range []string{"one", "two"} {
						if err := eng.MutateRow(skipInst, "t", []byte(row), []table.Mutation{{Kind: table.DeleteFromColumn, Family: fam, Qualifier: []byte(q)}}); err != nil {
							t.Fatal(err)
						}
						writeVersions(t, eng, row, fam, q, now, 1)
					}
				}
			}
			check("stale")
		})
	}
}
