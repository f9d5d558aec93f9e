package server

import (
	"math/rand/v2"
	"reflect"
	"testing"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/protobuf/proto"
)

// checkMutateRowsWire fails t unless the codec's two ways with b agree: if
// stashMutateRows keeps b, proto.Unmarshal accepts it, the request's names
// are protobuf's, and the entries the engine reads from the bytes
// (wireEntries, twice over, as MutateRowsFrom reads them) are exactly what
// the message path hands it: protobuf's entries through appendMutations,
// with the call's TTL. A request left to the decoders keeps its names
// unset. It reports whether b was kept.
func checkMutateRowsWire(t *testing.T, b []byte, exp expiry) bool {
	t.Helper()
	var got btpb.MutateRowsRequest
	w := stashMutateRows(b, &got)
	if w == nil {
		if !proto.Equal(&got, &btpb.MutateRowsRequest{}) {
			t.Fatalf("declined but changed the request: %v", &got)
		}
		return false
	}
	var want btpb.MutateRowsRequest
	if err := proto.Unmarshal(b, &want); err != nil {
		t.Fatalf("kept what protobuf refuses (%v)", err)
	}
	if got.TableName != want.TableName || got.AppProfileId != want.AppProfileId || got.AuthorizedViewName != want.AuthorizedViewName || got.Entries != nil {
		t.Fatalf("names %q %q %q (entries %d), want %q %q %q", got.TableName, got.AppProfileId, got.AuthorizedViewName, len(got.Entries),
			want.TableName, want.AppProfileId, want.AuthorizedViewName)
	}
	if n := len(want.Entries); w.Len() != n || n == 0 || n > MaxEntriesPerMutateRows {
		t.Fatalf("kept a request of %d entries as %d", n, w.Len())
	}
	checkWireEntries(t, w, want.Entries, exp)
	// A handler that needs the messages gets protobuf's.
	w.decodeInto(&got)
	if !proto.Equal(&got, &want) {
		t.Fatalf("decodeInto gave\n%v\nwant\n%v", &got, &want)
	}
	return true
}

// checkWireEntries fails t unless w reads entries, twice over as
// MutateRowsFrom reads them: each entry's row key, and its mutations as
// the message path converts them (appendMutations) with the call's TTL
// exp.
func checkWireEntries(t *testing.T, w *wireEntries, entries []*btpb.MutateRowsRequest_Entry, exp expiry) {
	t.Helper()
	d := &dataServer{}
	w.exp = exp
	for pass := range 2 {
		w.Rewind()
		for i, e := range entries {
			muts, err := d.appendMutations(nil, e.GetMutations(), exp)
			if err != nil {
				t.Fatalf("kept entry %d the message path refuses: %v", i, err)
			}
			row, n, ok := w.NextEntry()
			if !ok || string(row) != string(e.GetRowKey()) || n != len(muts) {
				t.Fatalf("pass %d entry %d: row %q, %d mutations, %v; want %q, %d", pass, i, row, n, ok, e.GetRowKey(), len(muts))
			}
			for j, wm := range muts {
				var mu table.Mutation
				if !w.NextMutation(&mu) {
					t.Fatalf("pass %d entry %d: ended after %d mutations, want %d", pass, i, j, len(muts))
				}
				if !reflect.DeepEqual(mu, wm) {
					t.Fatalf("pass %d entry %d mutation %d:\n%+v\nwant\n%+v", pass, i, j, mu, wm)
				}
			}
			var mu table.Mutation
			if w.NextMutation(&mu) {
				t.Fatalf("pass %d entry %d: more than %d mutations", pass, i, len(muts))
			}
		}
		if _, _, ok := w.NextEntry(); ok {
			t.Fatalf("pass %d: more than %d entries", pass, len(entries))
		}
	}
}

// TestMutateRowsWire: the cases of TestDecodeMutateRows, the declined ones,
// and their encodings with bytes changed at random, through
// checkMutateRowsWire; a bulk write's request is kept as bytes.
func TestMutateRowsWire(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	exps := []expiry{{}, {ttl: 5000}, {at: 1 << 40}}
	kept := 0
	for _, c := range mutateRowsCases() {
		b, err := proto.Marshal(c.req)
		if err != nil {
			t.Fatal(err)
		}
		k := checkMutateRowsWire(t, b, exps[0])
		if c.name == "bulk" && !k {
			t.Fatal("a bulk write's request was not kept as bytes")
		}
		if c.name == "empty" && k {
			t.Fatal("a request of no entries was kept as bytes")
		}
		corruptMutateRows(r, c.req, func(b []byte) {
			if checkMutateRowsWire(t, b, exps[r.IntN(len(exps))]) {
				kept++
			}
		})
	}
	if kept == 0 {
		t.Fatal("no corrupted encoding was kept: the check checked nothing")
	}
	for i, b := range wireOddities() {
		if !checkMutateRowsWire(t, b, exps[1]) {
			t.Fatalf("oddity %d was not kept as bytes", i)
		}
	}
}

// wireOddities are encodings protobuf accepts that a client seldom sends:
// fields given twice (the last wins), fields out of order, a row key after
// the mutations, a timestamp origin before the set_cell, the varints at
// their extremes, long tags and lengths.
func wireOddities() [][]byte {
	str, msg, vint := wireStr, wireMsg, wireVarint
	setCell := func(fam, q, v string, ts uint64) []byte {
		sc := str(nil, 1, fam)
		sc = str(sc, 2, q)
		sc = vint(sc, 3, ts)
		return str(sc, 4, v)
	}
	twice := str(setCell("f", "q", "v", 1000), 1, "g")
	twice = vint(twice, 3, 2000)
	mutA := vint(nil, 7, 2)
	mutA = msg(mutA, 1, twice)
	mutB := msg(nil, 1, setCell("f", "", "", 1<<63))
	mutB = vint(mutB, 7, 1<<40)
	entry := msg(nil, 2, mutA)
	entry = str(entry, 1, "row1")
	entry = msg(entry, 2, mutB)
	entry = str(entry, 1, "row2")
	req := str(nil, 3, "profile")
	req = msg(req, 2, entry)
	req = str(req, 1, "t1")
	req = str(req, 5, "")
	req = str(req, 1, "t2")
	req = msg(req, 2, msg(nil, 2, msg(nil, 1, setCell("f", "", string(make([]byte, 300)), 1<<64-1))))
	// Entries with no row key, no mutations, or neither.
	odd := msg(nil, 2, nil)
	odd = msg(odd, 2, str(nil, 1, "r"))
	odd = msg(odd, 2, msg(nil, 2, msg(nil, 1, nil)))
	return [][]byte{req, odd, append(append([]byte{}, req...), odd...)}
}

// FuzzMutateRowsWire: on any input the codec either leaves the request to
// the decoders or keeps bytes from which the engine reads what the message
// path gives it. The seeds (run by every go test) are the decoder's cases
// and wireOddities.
func FuzzMutateRowsWire(f *testing.F) {
	for _, c := range mutateRowsCases() {
		b, _ := proto.Marshal(c.req)
		f.Add(b, int64(0))
	}
	for _, b := range wireOddities() {
		f.Add(b, int64(2000))
	}
	f.Fuzz(func(t *testing.T, b []byte, ttl int64) {
		checkMutateRowsWire(t, b, expiry{ttl: ttl})
	})
}
