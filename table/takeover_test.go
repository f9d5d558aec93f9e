package table

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/storage"
)

// recLog keeps a commit log's records in memory.
type recLog struct {
	mu      sync.Mutex
	records [][]byte
}

func (l *recLog) Append(repr []byte) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, bytes.Clone(repr))
	return uint64(len(l.records)), nil
}

func (l *recLog) Finished(uint64) {}

func openTakeOverEngine(t *testing.T, fake *clock.Fake, cluster string) (*Engine, *Meta) {
	t.Helper()
	e, err := Open(Options{Dir: t.TempDir(), Clock: fake})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if err := e.SetReplicating(cluster); err != nil {
		t.Fatal(err)
	}
	m, err := e.CreateTable(testInst, "t", TableSpec{ID: 9, Families: []FamilySpec{{Name: "cf", GC: gcrule.MustParse("never")}, {Name: "gone", GC: gcrule.MustParse("never")}}})
	if err != nil {
		t.Fatal(err)
	}
	return e, m
}

// rawDump lists every stored cell (with its stamp) and tombstone of the
// table.
func rawDump(t *testing.T, e *Engine, m *Meta) string {
	t.Helper()
	var lines []string
	if err := e.RawCells(m, nil, nil, func(c RawCell) error {
		lines = append(lines, fmt.Sprintf("%s=%s %v", c.Coord(), c.Value, c.Stamp))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	tombs, err := e.SpanTombstones(testInst, "t", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	lines = append(lines, fmt.Sprintf("tombstones %x", tombs))
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestTakeOverReplaysRepairsAndTombstones: raw-cell repairs, replicated
// writes and deletes, and the tombstones deletes leave all go to the
// failover commit log, and replaying the log on another engine rebuilds
// them (a take-over lost all three before).
func TestTakeOverReplaysRepairsAndTombstones(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	src, m := openTakeOverEngine(t, fake, "a")
	dst, dm := openTakeOverEngine(t, fake, "a")
	log := &recLog{}
	src.SetCommitLog(log)

	if err := src.MutateRow(testInst, "t", []byte("r1"), []Mutation{{Kind: SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: 1000, Value: []byte("v1")}}); err != nil {
		t.Fatal(err)
	}
	fake.Advance(time.Millisecond)
	if err := src.MutateRow(testInst, "t", []byte("r2"), []Mutation{{Kind: DeleteFromRow}}); err != nil { // a tombstone
		t.Fatal(err)
	}
	// A repair from a peer cluster, and a cell a repair removes.
	fake.Advance(time.Millisecond)
	if _, err := src.RepairCell(m, RawCell{Row: []byte("r3"), Family: "cf", Qualifier: []byte("q"), Timestamp: 2000, Value: []byte("repaired"),
		Stamp: storage.Stamp{Commit: fake.Now().UnixMicro(), Cluster: "p"}}); err != nil {
		t.Fatal(err)
	}
	if err := src.MutateRow(testInst, "t", []byte("r4"), []Mutation{{Kind: SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: 3000, Value: []byte("doomed")}}); err != nil {
		t.Fatal(err)
	}
	if err := src.DeleteRawCell(m, RawCell{Row: []byte("r4"), Family: "cf", Qualifier: []byte("q"), Timestamp: 3000}); err != nil {
		t.Fatal(err)
	}
	// Replicated records from peer p: a write and a delete (a tombstone).
	fake.Advance(time.Millisecond)
	commit := fake.Now().UnixMicro()
	recs := []changestream.Record{
		{Position: changestream.Position{Commit: commit}, Type: changestream.User, RowKey: []byte("r5"),
			Mods: []changestream.Mod{{Kind: changestream.SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: 4000, Value: []byte("from-p")}}},
		{Position: changestream.Position{Commit: commit + 1}, Type: changestream.User, RowKey: []byte("r6"),
			Mods: []changestream.Mod{{Kind: changestream.DeleteFromRow}}},
	}
	if _, err := src.ApplyReplicated(m, "p", recs, changestream.Position{Commit: commit + 1}); err != nil {
		t.Fatal(err)
	}

	log.mu.Lock()
	records := log.records
	log.mu.Unlock()
	for _, r := range records {
		if _, err := dst.ReplayLogged(testInst, "t", []RowSpan{{}}, r); err != nil {
			t.Fatal(err)
		}
	}
	want, got := rawDump(t, src, m), rawDump(t, dst, dm)
	if !strings.Contains(want, "repaired") || !strings.Contains(want, "from-p") || strings.Contains(want, "doomed") || strings.Contains(want, "tombstones \n") {
		t.Fatalf("source:\n%s", want)
	}
	if got != want {
		t.Errorf("replayed:\n%s\nwant:\n%s", got, want)
	}

	// Tombstones travel beside a checkpoint: only the span's rows.
	enc, err := src.SpanTombstones(testInst, "t", []byte("r6"), nil)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := src.SpanTombstones(testInst, "t", nil, nil)
	if len(enc) == 0 || len(enc) >= len(all) {
		t.Errorf("tombstones of [r6, ): %d bytes, of the table %d", len(enc), len(all))
	}
	third, tm := openTakeOverEngine(t, fake, "a")
	if err := third.PutTombstones(testInst, "t", []RowSpan{{Start: []byte("r6")}}, all); err != nil {
		t.Fatal(err)
	}
	if got, _ := third.SpanTombstones(testInst, "t", nil, nil); !bytes.Equal(got, enc) || len(got) == 0 {
		t.Errorf("tombstones put (of rows r6 on): %x, want %x", got, enc)
	}
	_ = tm
}

// TestTakeOverDroppedFamily: a logged cell of a family dropped since is
// left out of the replay, and RedropFamilies marks a dropped family's id
// for the collector again (a checkpoint from before the drop brings its
// cells back).
func TestTakeOverDroppedFamily(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	src, _ := openTakeOverEngine(t, fake, "a")
	dst, _ := openTakeOverEngine(t, fake, "a")
	log := &recLog{}
	src.SetCommitLog(log)
	if err := src.MutateRow(testInst, "t", []byte("r1"), []Mutation{
		{Kind: SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: 1000, Value: []byte("kept")},
		{Kind: SetCell, Family: "gone", Qualifier: []byte("q"), Timestamp: 1000, Value: []byte("dropped")}}); err != nil {
		t.Fatal(err)
	}
	dm, err := dst.ModifyFamilies(testInst, "t", []FamilyMod{{Name: "gone", Drop: true}})
	if err != nil {
		t.Fatal(err)
	}
	goneID := uint32(2)
	if err := dst.ForgetDropped(testInst, "t", []uint32{goneID}); err != nil { // the collector swept it already
		t.Fatal(err)
	}
	n := 0
	for _, r := range log.records {
		k, err := dst.ReplayLogged(testInst, "t", []RowSpan{{}}, r)
		if err != nil {
			t.Fatal(err)
		}
		n += k
	}
	dm, _ = dst.Table(testInst, "t")
	var cells []string
	if err := dst.RawCells(&Meta{ID: dm.ID, Families: []Family{{ID: 1, Name: "cf"}, {ID: goneID, Name: "gone"}}}, nil, nil, func(c RawCell) error {
		cells = append(cells, c.Family+"="+string(c.Value))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(cells, " ") != "cf=kept" {
		t.Errorf("replayed cells %v, want only cf=kept", cells)
	}
	if err := dst.RedropFamilies(testInst, "t", map[uint32]string{goneID: "gone", 1: "cf", 99: "future"}); err != nil {
		t.Fatal(err)
	}
	dm, _ = dst.Table(testInst, "t")
	if fmt.Sprint(dm.DroppedFamilies) != "[2]" || dm.DroppedNames[goneID] != "gone" {
		t.Errorf("dropped families %v %v, want [2] (not a live one, nor one not known yet)", dm.DroppedFamilies, dm.DroppedNames)
	}
	_ = context.Background()
}
