package server

import (
	"math/rand"
	"reflect"
	"testing"

	"github.com/ebbtable/ebbtable/changestream"
	tablets "github.com/ebbtable/ebbtable/cluster"
)

// TestPartitionFilterAtBatchStart: a partition's reader asks st.wants of
// each record of a batch while ReadRows reads it, before it advances st over
// the batch's earlier records (partitionReader.run); the old reader asked
// after. Over random states of several pieces at different positions (a
// merged partition) and random records, both send the same records with the
// same tokens and end at the same token.
func TestPartitionFilterAtBatchStart(t *testing.T) {
	rows := []string{"", "a", "b", "c", "d", "e", "f"}
	for seed := int64(0); seed < 300; seed++ {
		rng := rand.New(rand.NewSource(seed))
		// Pieces cut at random rows, each at a random position.
		var st csState
		cuts := []string{""}
		for _, r := range rows[1:] {
			if rng.Intn(2) == 0 {
				cuts = append(cuts, r)
			}
		}
		for i, c := range cuts {
			r := tablets.Range{Start: []byte(c)}
			if i+1 < len(cuts) {
				r.End = []byte(cuts[i+1])
			}
			st = append(st, csPiece{r: r, pos: changestream.Position{Commit: int64(10 + rng.Intn(20)), Index: uint32(rng.Intn(2))}})
		}
		type rec struct {
			row string
			p   changestream.Position
		}
		var recs []rec
		c := int64(5)
		for range rng.Intn(40) {
			c += int64(rng.Intn(2))
			recs = append(recs, rec{row: rows[rng.Intn(len(rows))] + string(rune('0'+rng.Intn(2))), p: changestream.Position{Commit: c, Index: uint32(len(recs))}})
		}
		type sent struct{ row, token string }
		clone := func(st csState) csState { return append(csState(nil), st...) }

		old := clone(st)
		var want []sent
		for _, r := range recs {
			w := old.wants([]byte(r.row), r.p)
			old.advance(r.p)
			if w {
				want = append(want, sent{r.row, old.token()})
			}
		}

		cur := clone(st)
		var kept []rec
		for _, r := range recs { // ReadRows: keep is asked before the loop below
			if cur.wants([]byte(r.row), r.p) {
				kept = append(kept, r)
			}
		}
		var got []sent
		for _, r := range kept {
			cur.advance(r.p)
			got = append(got, sent{r.row, cur.token()})
		}
		if len(recs) > 0 {
			cur.advance(recs[len(recs)-1].p)
		}
		if !reflect.DeepEqual(got, want) || cur.token() != old.token() {
			t.Fatalf("seed %d: state %+v\n got %v, end %s\nwant %v, end %s", seed, st, got, cur.token(), want, old.token())
		}
	}
}
