package changestream

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand"
	"reflect"
	"sort"
	"testing"
)

// memStore is a sorted in-memory key space (the reader's Store).
type memStore struct{ keys, vals [][]byte }

func (s *memStore) put(k, v []byte) {
	i := sort.Search(len(s.keys), func(i int) bool { return bytes.Compare(s.keys[i], k) >= 0 })
	if i < len(s.keys) && bytes.Equal(s.keys[i], k) {
		s.vals[i] = v
		return
	}
	s.keys = append(s.keys[:i], append([][]byte{k}, s.keys[i:]...)...)
	s.vals = append(s.vals[:i], append([][]byte{v}, s.vals[i:]...)...)
}

func (s *memStore) Iter(lower, upper []byte) (Iter, error) {
	lo := sort.Search(len(s.keys), func(i int) bool { return bytes.Compare(s.keys[i], lower) >= 0 })
	hi := sort.Search(len(s.keys), func(i int) bool { return bytes.Compare(s.keys[i], upper) >= 0 })
	return &memIter{s: s, lo: lo, hi: hi, i: -1}, nil
}

type memIter struct {
	s         *memStore
	lo, hi, i int
}

func (it *memIter) ok() bool               { return it.i >= it.lo && it.i < it.hi }
func (it *memIter) First() bool            { it.i = it.lo; return it.ok() }
func (it *memIter) Last() bool             { it.i = it.hi - 1; return it.ok() }
func (it *memIter) Next() bool             { it.i++; return it.ok() }
func (it *memIter) Key() []byte            { return it.s.keys[it.i] }
func (it *memIter) Value() ([]byte, error) { return it.s.vals[it.i], nil }
func (it *memIter) Error() error           { return nil }
func (it *memIter) Close() error           { return nil }

// randomRecord makes a record of row key row; about half carry expiries
// (the flag older records lack) and strings of random lengths before the
// row key, so RowKey's skipping is exercised.
func randomRecord(rng *rand.Rand, row []byte) Record {
	r := Record{Type: User, Reason: ReasonUser, RowKey: row}
	if rng.Intn(3) == 0 {
		r = Record{Type: GarbageCollection, Reason: ReasonGCAge, TransactionTag: TagGarbageCollection, IsSystem: true, RowKey: row}
	}
	if rng.Intn(4) == 0 {
		r.SourceCluster = string(bytes.Repeat([]byte("c"), rng.Intn(200)))
	}
	for i := rng.Intn(4); i >= 0; i-- {
		m := Mod{Kind: SetCell, Family: "cf", Qualifier: []byte{byte(rng.Intn(256))}, Timestamp: rng.Int63n(1 << 40), Value: make([]byte, rng.Intn(300))}
		if rng.Intn(2) == 0 {
			m.ExpireAt = rng.Int63n(1 << 40)
		}
		if rng.Intn(5) == 0 {
			m = Mod{Kind: DeleteFromRow}
		}
		r.Mods = append(r.Mods, m)
	}
	return r
}

func TestRowKeyMatchesDecode(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 500; i++ {
		row := make([]byte, rng.Intn(300))
		rng.Read(row)
		rec := randomRecord(rng, row)
		enc := rec.Encode()
		got, err := RowKey(enc)
		if err != nil || !bytes.Equal(got, row) {
			t.Fatalf("RowKey = %x, %v; want %x", got, err, row)
		}
		// A truncation inside the row key (or before it) is corrupt.
		d, _ := Decode(enc)
		head := 3
		for _, f := range [][]byte{[]byte(d.Reason), []byte(d.TransactionTag), []byte(d.SourceCluster), d.RowKey} {
			head += len(binary.AppendUvarint(nil, uint64(len(f)))) + len(f)
		}
		for n := 0; n < head; n++ {
			if _, err := RowKey(enc[:n]); err == nil {
				t.Fatalf("RowKey of %d of %d bytes (row key ends at %d) decoded", n, len(enc), head)
			}
		}
	}
	if _, err := RowKey([]byte{9, 1, 0, 0, 0, 0, 0}); err == nil {
		t.Error("unknown version read")
	}
}

// randomLog writes n records of table id (and a few of the tables beside
// it) with row keys drawn from a small set, so ranges' edges fall on them.
func randomLog(rng *rand.Rand, id uint64, n int) (*memStore, [][]byte) {
	s := &memStore{}
	rows := [][]byte{{}, {0}, []byte("a"), []byte("a\x00"), []byte("ab"), []byte("b"), []byte("m"), []byte("mm"), []byte("z"), {0xff}, {0xff, 0xff}}
	commit := int64(1000)
	for i := 0; i < n; i++ {
		commit += int64(rng.Intn(3))
		p := Position{Commit: commit, Tiebreaker: int32(rng.Intn(3)) - 1, Index: uint32(rng.Intn(3))}
		if rng.Intn(20) == 0 {
			p.Tiebreaker = -1 // sorts last (as uint32)
		}
		tid := id
		if rng.Intn(10) == 0 {
			tid = id - 1 + 2*uint64(rng.Intn(2))
		}
		r := randomRecord(rng, rows[rng.Intn(len(rows))])
		s.put(Key(tid, p), r.Encode())
	}
	return s, rows
}

// oldRead is how readers read before ReadRows: Read every record, decode
// it, keep the rows in [start, end); it pages by limit records read.
func oldRead(t *testing.T, s Store, id uint64, lower []byte, upTo int64, limit int, start, end []byte) ([]Record, Position) {
	var out []Record
	var last Position
	for {
		recs, err := Read(s, id, lower, upTo, limit)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			last = r.Position
			lower = After(id, r.Position)
			if bytes.Compare(r.RowKey, start) >= 0 && (len(end) == 0 || bytes.Compare(r.RowKey, end) < 0) {
				out = append(out, r)
			}
		}
		if len(recs) < limit {
			return out, last
		}
	}
}

// newRead pages with ReadRows as the partition reader does.
func newRead(t *testing.T, s Store, id uint64, lower []byte, upTo int64, limit, scan int, start, end []byte) ([]Record, Position) {
	var out []Record
	var last Position
	for calls := 0; ; calls++ {
		if calls > 10000 {
			t.Fatal("ReadRows does not get on")
		}
		b, err := ReadRows(s, id, lower, upTo, limit, scan, RowsIn(start, end))
		if err != nil {
			t.Fatal(err)
		}
		if (limit > 0 && len(b.Records) > limit) || (scan > 0 && b.Examined > scan) || len(b.Records) > b.Examined {
			t.Fatalf("batch of %d kept, %d examined over limits %d, %d", len(b.Records), b.Examined, limit, scan)
		}
		for i, r := range b.Records {
			if i > 0 && !b.Records[i-1].Position.Less(r.Position) || b.Last.Less(r.Position) {
				t.Fatalf("batch out of order at %v (last %v)", r.Position, b.Last)
			}
		}
		out = append(out, b.Records...)
		if b.Examined > 0 {
			last = b.Last
			lower = After(id, b.Last)
		}
		if !b.Full {
			return out, last
		}
		if b.Examined == 0 {
			t.Fatal("a full batch examined nothing")
		}
	}
}

// TestReadRowsDifferential checks ReadRows against the reader it replaces:
// over random logs, ranges (edges on and beside row keys), lower keys,
// closed timestamps and limits, the records kept are exactly the old
// reader's records of the range, in order, and both end at the same
// position.
func TestReadRowsDifferential(t *testing.T) {
	const id = 7
	for seed := int64(0); seed < 15; seed++ {
		rng := rand.New(rand.NewSource(seed))
		s, rows := randomLog(rng, id, 1+rng.Intn(200))
		var commits []int64
		for _, k := range s.keys {
			if tid, p, _ := DecodeKey(k); tid == id {
				commits = append(commits, p.Commit)
			}
		}
		pick := func() []byte {
			r := rows[rng.Intn(len(rows))]
			if rng.Intn(3) == 0 {
				return append(append([]byte(nil), r...), 0) // just past a row
			}
			return r
		}
		for trial := 0; trial < 25; trial++ {
			start, end := pick(), pick()
			if rng.Intn(4) == 0 {
				end = nil
			}
			if len(end) > 0 && bytes.Compare(start, end) >= 0 {
				start, end = end, start
				if bytes.Equal(start, end) {
					end = nil
				}
			}
			var lower []byte
			upTo := int64(1 << 40)
			if len(commits) > 0 {
				c := commits[rng.Intn(len(commits))]
				switch rng.Intn(3) {
				case 0:
					lower = TimeKey(id, c)
				case 1:
					lower = After(id, Position{Commit: c, Tiebreaker: int32(rng.Intn(3)) - 1, Index: uint32(rng.Intn(3))})
				default:
					lower = TableStart(id)
				}
				upTo = commits[rng.Intn(len(commits))] + int64(rng.Intn(3)) - 1
			} else {
				lower = TableStart(id)
			}
			limit, scan := rng.Intn(6), rng.Intn(12)
			if rng.Intn(3) == 0 {
				limit, scan = 0, 0
			}
			if limit == 0 && scan == 0 && rng.Intn(2) == 0 {
				scan = 1
			}
			want, wantLast := oldRead(t, s, id, lower, upTo, 1+rng.Intn(8), start, end)
			got, gotLast := newRead(t, s, id, lower, upTo, limit, scan, start, end)
			if len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) || gotLast != wantLast {
				t.Fatalf("seed %d trial %d: rows [%q, %q) from %x to %d (limit %d scan %d):\n got %d records, last %v\nwant %d records, last %v\n%s",
					seed, trial, start, end, lower, upTo, limit, scan, len(got), gotLast, len(want), wantLast, firstDiff(got, want))
			}
		}
	}
}

func firstDiff(got, want []Record) string {
	for i := 0; i < len(got) && i < len(want); i++ {
		if !reflect.DeepEqual(got[i], want[i]) {
			return fmt.Sprintf("first difference at %d: got %v %q, want %v %q", i, got[i].Position, got[i].RowKey, want[i].Position, want[i].RowKey)
		}
	}
	if len(got) > len(want) {
		return fmt.Sprintf("extra: %v %q", got[len(want)].Position, got[len(want)].RowKey)
	}
	if len(want) > len(got) {
		return fmt.Sprintf("missing: %v %q", want[len(got)].Position, want[len(got)].RowKey)
	}
	return ""
}

// benchLog is a log of tablets×per records, round-robin over tablets
// (row keys "t<i>/<n>"), as a node's log of several tablets' writes.
func benchLog(tablets, per int) *memStore {
	s := &memStore{}
	n := tablets * per
	s.keys, s.vals = make([][]byte, 0, n), make([][]byte, 0, n)
	for i := 0; i < n; i++ {
		row := []byte(fmt.Sprintf("t%02d/%08d", i%tablets, i))
		r := Record{Type: User, Reason: ReasonUser, RowKey: row, Mods: []Mod{
			{Kind: SetCell, Family: "cf", Qualifier: []byte("field0"), Timestamp: int64(i), Value: bytes.Repeat([]byte{'v'}, 100)},
		}}
		s.keys = append(s.keys, Key(1, Position{Commit: int64(1000 + i), Tiebreaker: 1}))
		s.vals = append(s.vals, r.Encode())
	}
	return s
}

// BenchmarkReadPartition reads one tablet's partition of a log of N
// tablets' records: "old" decodes every record and drops the others' (the
// reader before ReadRows), "new" is ReadRows. ns/op is per record sent.
func BenchmarkReadPartition(b *testing.B) {
	for _, tablets := range []int{1, 10, 30} {
		s := benchLog(tablets, 2000)
		start, end := []byte("t00/"), []byte("t00/\xff")
		b.Run(fmt.Sprintf("tablets=%d/old", tablets), func(b *testing.B) {
			b.ReportAllocs()
			sent := 0
			for i := 0; i < b.N; {
				lower := TableStart(1)
				for i < b.N {
					recs, err := Read(s, 1, lower, 1<<40, 512)
					if err != nil {
						b.Fatal(err)
					}
					for _, r := range recs {
						lower = After(1, r.Position)
						if bytes.Compare(r.RowKey, start) >= 0 && bytes.Compare(r.RowKey, end) < 0 {
							sent++
							i++
						}
					}
					if len(recs) < 512 {
						break
					}
				}
			}
			_ = sent
		})
		b.Run(fmt.Sprintf("tablets=%d/new", tablets), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; {
				lower := TableStart(1)
				for i < b.N {
					bt, err := ReadRows(s, 1, lower, 1<<40, 512, 16*512, RowsIn(start, end))
					if err != nil {
						b.Fatal(err)
					}
					i += len(bt.Records)
					if bt.Examined > 0 {
						lower = After(1, bt.Last)
					}
					if !bt.Full {
						break
					}
				}
			}
		})
	}
}
