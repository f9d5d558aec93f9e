package table

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/storage"
)

// Fuzz targets for what a peer cluster sends this one: replicated records
// (EbbAdmin/Pull, applied by ApplyReplicated) and the raw cells and
// tombstones of a join snapshot (EbbAdmin/Snapshot, written by
// ImportPairs). A peer is another cluster of the same instance, but its
// bytes cross the network and may come from another version: whatever it
// sends must be refused whole (nothing changes) or leave a table every read,
// replicated write and export still works on.

// fuzzReplica is one engine for a whole fuzz run; each input gets a fresh
// table, dropped afterwards, so inputs do not depend on each other.
type fuzzReplica struct {
	e *Engine
	n int
}

const fuzzPeer = "peer"

func newFuzzReplica(f *testing.F) *fuzzReplica {
	e, err := Open(Options{Dir: f.TempDir(), Clock: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close() })
	if err := e.SetReplicating("here"); err != nil {
		f.Fatal(err)
	}
	return &fuzzReplica{e: e}
}

// table makes a table with families cf and cg, a few cells (stamped here)
// and a tombstone, and drops it when the input is done.
func (r *fuzzReplica) table(t *testing.T) *Meta {
	t.Helper()
	r.n++
	name := fmt.Sprintf("t%d", r.n)
	m, err := r.e.CreateTable(testInst, name, TableSpec{Families: []FamilySpec{
		{Name: "cf", GC: gcrule.MustParse("never")}, {Name: "cg", GC: gcrule.MustParse("maxversions=1")}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.e.DeleteTable(testInst, name); err != nil {
			t.Fatal(err)
		}
	})
	for _, row := range []string{"a", "b\x00\x01"} {
		if err := r.e.MutateRow(testInst, name, []byte(row), []Mutation{
			{Kind: SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: 1000, Value: []byte("v1")},
			{Kind: SetCell, Family: "cg", Qualifier: []byte("q"), Timestamp: 2000, Value: []byte("v2"), ExpireAt: cell.MaxTimestamp},
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.e.MutateRow(testInst, name, []byte("a"), []Mutation{{Kind: DeleteFromColumn, Family: "cf", Qualifier: []byte("q"), StartTS: 0, EndTS: 1000}}); err != nil {
		t.Fatal(err)
	}
	return m
}

// rawDigest hashes every stored key and value of a table: cells,
// tombstones and this cluster's checkpoint of the peer.
func (r *fuzzReplica) rawDigest(t *testing.T, m *Meta) [32]byte {
	t.Helper()
	h := sha256.New()
	for _, span := range [][2][]byte{
		{storage.TablePrefix(m.ID), storage.TableEnd(m.ID)},
		{tableTombstones(m.ID), storage.PrefixEnd(tableTombstones(m.ID))},
	} {
		it, err := r.e.store.NewIter(&pebble.IterOptions{LowerBound: span[0], UpperBound: span[1]})
		if err != nil {
			t.Fatal(err)
		}
		for ok := it.First(); ok; ok = it.Next() {
			fmt.Fprintf(h, "%x=%x\n", it.Key(), it.Value())
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}
	p, ok, err := r.e.Checkpoint(m, fuzzPeer)
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	fmt.Fprintf(h, "ckpt %v %v\n", p, ok)
	return [32]byte(h.Sum(nil))
}

// readAll reads the whole table as clients see it, checking every cell is
// one a client could have written.
func (r *fuzzReplica) readAll(t *testing.T, m *Meta) string {
	t.Helper()
	var out bytes.Buffer
	err := r.e.ReadRows(context.Background(), m.Instance, m.Name, ReadRequest{}, func(row cell.Row) error {
		if err := validateRowKey(row.Key); err != nil {
			t.Errorf("read returned row %q (%d bytes): %v", row.Key[:min(len(row.Key), 16)], len(row.Key), err)
		}
		for _, c := range row.Cells {
			if c.Timestamp < 0 || c.Timestamp > cell.MaxTimestamp {
				t.Errorf("read returned row %q cell %s:%q at timestamp %d", row.Key[:min(len(row.Key), 16)], c.Family, c.Qualifier, c.Timestamp)
			}
			if c.ExpireAt < 0 || c.ExpireAt > cell.MaxTimestamp {
				t.Errorf("read returned row %q cell %s:%q expiring at %d", row.Key[:min(len(row.Key), 16)], c.Family, c.Qualifier, c.ExpireAt)
			}
			fmt.Fprintf(&out, "%q %s:%q@%d=%q exp %d\n", row.Key, c.Family, c.Qualifier, c.Timestamp, c.Value, c.ExpireAt)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read after an accepted input: %v", err)
	}
	return out.String()
}

// stillWorks checks the table after an accepted input: a full read, a
// replicated write and delete on every row it holds (tombstones and stamps
// are decoded on that path) and an export all succeed.
func (r *fuzzReplica) stillWorks(t *testing.T, m *Meta) {
	t.Helper()
	r.readAll(t, m)
	var rows [][]byte
	err := r.e.ReadRows(context.Background(), m.Instance, m.Name, ReadRequest{}, func(row cell.Row) error {
		rows = append(rows, bytes.Clone(row.Key))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rows = append(rows, []byte("a"), []byte("b\x00\x01"))
	var recs []changestream.Record
	for _, row := range rows {
		recs = append(recs, changestream.Record{Type: changestream.User, Reason: changestream.ReasonUser, RowKey: row,
			Position: changestream.Position{Commit: 1 << 52},
			Mods: []changestream.Mod{
				{Kind: changestream.SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: 5000, Value: []byte("later")},
				{Kind: changestream.DeleteFromColumn, Family: "cg", Qualifier: []byte("q")},
			}})
	}
	if _, err := r.e.ApplyReplicated(m, "other", recs, changestream.Position{Commit: 1 << 52}); err != nil {
		t.Fatalf("a replicated write after an accepted input: %v", err)
	}
	if _, err := r.e.Export(func(ExportItem) error { return nil }); err != nil {
		t.Fatalf("export after an accepted input: %v", err)
	}
	r.readAll(t, m)
}

// FuzzApplyReplicated applies what a peer might send in EbbAdmin/Pull: one
// record built from the fuzzer's fields (row, one mod of any kind, its
// timestamps, expiry, commit time) plus, when extra decodes, a record in
// the binary encoding the pull carries. A refused batch changes nothing;
// an accepted one leaves a table holding only cells a client could have
// written, sets the checkpoint, and applying it again changes no cell
// (ApplyReplicated is idempotent, as the puller relies on).
func FuzzApplyReplicated(f *testing.F) {
	del := changestream.Record{Type: changestream.User, Reason: changestream.ReasonUser, RowKey: []byte("b\x00\x01"), Mods: []changestream.Mod{
		{Kind: changestream.DeleteFromColumn, Family: "cf", Qualifier: []byte("q"), StartTS: 1000, EndTS: 3000},
		{Kind: changestream.DeleteFromFamily, Family: "cg"},
		{Kind: changestream.DeleteFromRow}}}
	const c0 = int64(1767225600000000)
	f.Add([]byte("a"), uint8(changestream.SetCell), "cf", []byte("q"), int64(3000), []byte("x"), int64(0), int64(0), int64(c0), c0, false, del.Encode())
	f.Add([]byte("a"), uint8(changestream.SetCell), "cg", []byte("q"), int64(2000), []byte("y"), int64(0), int64(0), int64(0), int64(5), false, []byte{})
	f.Add([]byte("b\x00\x01"), uint8(changestream.DeleteFromColumn), "cf", []byte("q"), int64(0), []byte{}, int64(1000), int64(0), int64(0), c0, true, []byte{})
	f.Add([]byte("a"), uint8(changestream.DeleteFromFamily), "cg", []byte{}, int64(0), []byte{}, int64(0), int64(0), int64(0), c0, false, []byte{})
	f.Add([]byte("a"), uint8(changestream.DeleteFromRow), "", []byte{}, int64(0), []byte{}, int64(0), int64(0), int64(0), int64(-1), false, []byte{})
	// Found by reading and by fuzzing: records the local write path refuses
	// (an empty or oversized row key, timestamps and expiries outside year
	// 1970..9999, reversed or negative delete ranges) used to be applied.
	for _, c := range []struct {
		row                 []byte
		kind                changestream.ModKind
		ts, start, end, exp int64
		commit              int64
	}{
		{nil, changestream.SetCell, 1000, 0, 0, 0, c0},
		{make([]byte, MaxRowKeyBytes+1), changestream.SetCell, 1000, 0, 0, 0, c0},
		{[]byte("a"), changestream.SetCell, -5000, 0, 0, 0, c0},
		{[]byte("a"), changestream.SetCell, 1 << 62, 0, 0, 0, c0},
		{[]byte("a"), changestream.SetCell, 1000, 0, 0, -1, c0},
		{[]byte("a"), changestream.DeleteFromColumn, 0, math.MinInt64, math.MinInt64, 0, c0},
		{[]byte("a"), changestream.DeleteFromColumn, 0, 5000, 1000, 0, c0},
		{[]byte("a"), changestream.SetCell, 1000, 0, 0, 0, math.MaxInt64},
	} {
		f.Add(c.row, uint8(c.kind), "cf", []byte("q"), c.ts, []byte("v"), c.start, c.end, c.exp, c.commit, false, []byte{})
	}
	r := newFuzzReplica(f)
	f.Fuzz(func(t *testing.T, row []byte, kind uint8, family string, qual []byte, ts int64, value []byte, start, end, exp, commit int64, gc bool, extra []byte) {
		rec := changestream.Record{Type: changestream.User, Reason: changestream.ReasonUser, RowKey: row,
			Position: changestream.Position{Commit: commit},
			Mods:     []changestream.Mod{{Kind: changestream.ModKind(kind), Family: family, Qualifier: qual, Timestamp: ts, Value: value, StartTS: start, EndTS: end, ExpireAt: exp}}}
		if gc {
			rec.Type, rec.Reason, rec.IsSystem = changestream.GarbageCollection, changestream.ReasonGCVersions, true
		}
		recs := []changestream.Record{rec}
		if x, err := changestream.Decode(extra); err == nil {
			x.Position = changestream.Position{Commit: commit + 1}
			recs = append(recs, x)
		}
		m := r.table(t)
		before := r.rawDigest(t, m)
		through := changestream.Position{Commit: commit, Index: 7}
		if _, err := r.e.ApplyReplicated(m, fuzzPeer, recs, through); err != nil {
			if after := r.rawDigest(t, m); after != before {
				t.Fatalf("refused batch (%v) changed the table", err)
			}
			return
		}
		if p, ok, err := r.e.Checkpoint(m, fuzzPeer); err != nil || !ok || p != through {
			t.Fatalf("checkpoint after apply: %v %v %v, want %v", p, ok, err, through)
		}
		once := r.readAll(t, m)
		if _, err := r.e.ApplyReplicated(m, fuzzPeer, recs, through); err != nil {
			t.Fatalf("applying an accepted batch again: %v", err)
		}
		if twice := r.readAll(t, m); twice != once {
			t.Fatalf("applying the batch again changed the table:\n%s\nthen\n%s", once, twice)
		}
		r.stillWorks(t, m)
	})
}

// FuzzImportPairs writes up to two raw pairs of a join snapshot (cells or
// tombstones, base64 on the wire) into a table. A refused import changes
// nothing; an accepted one leaves a table every read, replicated write and
// export still works on.
func FuzzImportPairs(f *testing.F) {
	cellKey := storage.CellKey(99, []byte("r"), 1, []byte("q"), 7000)
	stamped := storage.EncodeStamped([]byte("v"), 0, storage.Stamp{Commit: 1 << 50, Cluster: fuzzPeer})
	tomb := tombstoneKey(99, []byte("a"), storage.Stamp{Commit: 1 << 50, Cluster: fuzzPeer})
	span := deleteSpan{kind: changestream.DeleteFromColumn, family: 1, qualifier: []byte("q"), startTS: 0, endTS: 9000}.encode()
	f.Add(uint8(ExportCells), cellKey, stamped, storage.CellKey(99, []byte("s"), 2, nil, 0), storage.EncodeValue(nil, 5000))
	f.Add(uint8(ExportTombstones), tomb, span, tombstoneKey(99, []byte("b\x00\x01"), storage.Stamp{Commit: 3}), deleteSpan{kind: changestream.DeleteFromRow}.encode())
	f.Add(uint8(ExportCells), cellKey[:len(cellKey)-3], []byte{0x80}, []byte{}, []byte{})
	f.Add(uint8(ExportTombstones), tomb[:len(tomb)-2], span[:3], []byte{}, []byte{})
	r := newFuzzReplica(f)
	f.Fuzz(func(t *testing.T, kind uint8, k1, v1, k2, v2 []byte) {
		pairs := [][2][]byte{{k1, v1}}
		if len(k2) > 0 {
			pairs = append(pairs, [2][]byte{k2, v2})
		}
		m := r.table(t)
		before := r.rawDigest(t, m)
		if err := r.e.ImportPairs(m, ExportKind(kind%4), pairs); err != nil {
			if after := r.rawDigest(t, m); after != before {
				t.Fatalf("refused import (%v) changed the table", err)
			}
			return
		}
		r.stillWorks(t, m)
	})
}

// FuzzDecodeSpan: a tombstone value decodes or is refused, and what decodes
// encodes to bytes that decode the same.
func FuzzDecodeSpan(f *testing.F) {
	f.Add(deleteSpan{kind: changestream.DeleteFromColumn, family: 1, qualifier: []byte("q"), startTS: 0, endTS: 9000}.encode())
	f.Add(deleteSpan{kind: changestream.DeleteFromRow}.encode())
	f.Add([]byte{2, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, v []byte) {
		d, err := decodeSpan(v)
		if err != nil {
			return
		}
		again, err := decodeSpan(d.encode())
		if err != nil || !reflect.DeepEqual(again, d) {
			t.Fatalf("%x decodes to %+v, which encodes to %x, which decodes to %+v, %v", v, d, d.encode(), again, err)
		}
	})
}
