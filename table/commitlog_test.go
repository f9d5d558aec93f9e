package table_test

import (
	"bytes"
	"sync"
	"testing"

	"github.com/ebbtable/ebbtable/table"
)

// memLog is a commit log in memory: the batches in order.
type memLog struct {
	mu       sync.Mutex
	records  [][]byte
	finished int
}

func (l *memLog) Append(repr []byte) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, bytes.Clone(repr))
	return uint64(len(l.records)), nil
}

func (l *memLog) Finished(uint64) {
	l.mu.Lock()
	l.finished++
	l.mu.Unlock()
}

// TestReplayLogged replays one engine's commit log onto another for one
// span: the span's cells (sets, a row deletion, a prefix drop clamped to
// the span) and nothing outside it; a drop's record is told apart; a
// drop applied afterwards to the span only reaches the span.
func TestReplayLogged(t *testing.T) {
	src, dst, _ := openSpanPair(t)
	createSpanTable(t, src, dst)
	log := &memLog{}
	src.SetCommitLog(log)

	writeSpanCells(t, src, 2000, 2, 1500, spanStart) // rows 1500+ have native-TTL cells
	if err := src.MutateRow("i", "t", spanRow(1100), []table.Mutation{{Kind: table.DeleteFromRow}}); err != nil {
		t.Fatal(err)
	}
	if err := src.DropRowRange("i", "t", []byte("row00120"), false); err != nil {
		t.Fatal(err)
	}
	if err := src.DropRowRange("i", "t", []byte("row0019"), false); err != nil { // wholly outside the span below
		t.Fatal(err)
	}
	log.mu.Lock()
	records := log.records
	if log.finished != len(records) {
		t.Errorf("%d records, %d finished", len(records), log.finished)
	}
	log.mu.Unlock()
	drops := 0
	for _, r := range records {
		if table.LoggedDrop(r, spanTableID) {
			drops++
		}
		if table.LoggedDrop(r, spanTableID+1) {
			t.Error("a drop of another table")
		}
	}
	if drops != 2 {
		t.Errorf("%d drop records, want 2", drops)
	}

	lo, hi := spanRow(1000), spanRow(1600)
	spans := []table.RowSpan{{Start: lo, End: hi}}
	keys := 0
	for _, r := range records {
		n, err := dst.ReplayLogged("i", "t", spans, r)
		if err != nil {
			t.Fatal(err)
		}
		keys += n
	}
	wantRows, wantFams := readSpan(t, src, lo, hi)
	gotRows, gotFams := readSpan(t, dst, lo, hi)
	if gotRows != wantRows || gotFams["f"] != wantFams["f"] || gotFams["t"] != wantFams["t"] || gotRows != 600-1-10 {
		t.Errorf("replayed span: %d rows %v, source %d rows %v (want 589 rows)", gotRows, gotFams, wantRows, wantFams)
	}
	if all, _ := readSpan(t, dst, nil, nil); all != gotRows {
		t.Errorf("the replay wrote %d rows outside the span", all-gotRows)
	}
	// The GC agenda entries of the span's native-TTL rows came along.
	m, err := dst.Table("i", "t")
	if err != nil {
		t.Fatal(err)
	}
	if due, later, err := dst.AgendaCounts(m, spanStart.UnixMicro(), 1<<20); err != nil || due+later != 100 {
		t.Errorf("agenda entries on the target: %d due, %d later, %v; want 100", due, later, err)
	}
	t.Logf("%d records, %d keys replayed", len(records), keys)

	// A drop the source missed, applied to the span only.
	if err := dst.DropInSpans("i", "t", []byte("row0015"), false, []table.RowSpan{{Start: spanRow(1550), End: hi}}); err != nil {
		t.Fatal(err)
	}
	if rows, _ := readSpan(t, dst, lo, hi); rows != 589-50 {
		t.Errorf("after the drop in the span: %d rows, want 539", rows)
	}
}
