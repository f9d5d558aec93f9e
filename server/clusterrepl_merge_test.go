package server

import (
	"testing"

	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/replication"
)

// TestMergeAnswersShipsOneCopy: a moved tablet's records sit on its old
// and its new owner under the same positions; a cluster's answer to a
// peer's pull carries each once, in position order, up to the smallest
// closed timestamp.
func TestMergeAnswersShipsOneCopy(t *testing.T) {
	rec := func(commit int64, tb int32, row string) changestream.Record {
		return changestream.Record{Position: changestream.Position{Commit: commit, Tiebreaker: tb}, RowKey: []byte(row)}
	}
	answer := func(closed int64, recs ...changestream.Record) *replication.PullResponse {
		return &replication.PullResponse{Closed: closed, Tables: []replication.PulledTable{{Instance: "i", Table: "t", Records: recs}}}
	}
	oldOwner := answer(100, rec(10, 1, "a"), rec(20, 1, "b"))
	newOwner := answer(90, rec(10, 1, "a"), rec(20, 1, "b"), rec(20, 2, "c"), rec(95, 2, "d"))
	out := mergeAnswers(oldOwner, []*replication.PullResponse{oldOwner, newOwner})
	if len(out.Tables) != 1 {
		t.Fatalf("tables: %+v", out.Tables)
	}
	var got []string
	for _, r := range out.Tables[0].Records {
		got = append(got, string(r.RowKey))
	}
	if want := "a b c"; len(got) != 3 || got[0]+" "+got[1]+" "+got[2] != want {
		t.Errorf("merged records %v, want %s (one copy each, none past the closed timestamp 90)", got, want)
	}
	if out.Shipped != 3 {
		t.Errorf("Shipped = %d, want 3", out.Shipped)
	}
}
