package table

import (
	"fmt"
	"testing"

	"github.com/ebbtable/ebbtable/changestream"
)

func recordsLine(recs []changestream.Record) string {
	out := ""
	for _, r := range recs {
		out += fmt.Sprintf("%s@%d/%d/%d:%s ", r.RowKey, r.Commit, r.Tiebreaker, r.Index, r.Reason)
	}
	return out
}

// TestLoggedChanges: every recorded write's commit log record carries its
// records (DropRowRange's included), so the records of a span rebuilt from
// the log, or carried beside a checkpoint, are the engine's own, at their
// own positions.
func TestLoggedChanges(t *testing.T) {
	e, _, m := openStreamed(t)
	e.SetChangeTiebreaker(7)
	log := &recLog{}
	e.SetCommitLog(log)
	for _, row := range []string{"a1", "b1", "b2", "c1", "n1", "n2"} {
		if err := e.MutateRow(testInst, "t", []byte(row), []Mutation{{Kind: SetCell, Family: "cf", Timestamp: 1000, Value: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.DropRowRange(testInst, "t", []byte("n"), false); err != nil {
		t.Fatal(err)
	}
	spans := []RowSpan{{Start: []byte("b"), End: []byte("c")}, {Start: []byte("n")}}
	var logged []changestream.Record
	for _, repr := range log.records {
		recs, err := LoggedChanges(m, spans, repr)
		if err != nil {
			t.Fatal(err)
		}
		logged = append(logged, recs...)
	}
	want := FilterChanges(allChanges(t, e, m), spans)
	if len(want) != 6 { // b1, b2, n1, n2 and the drop's two
		t.Fatalf("the engine's records of the spans: %s", recordsLine(want))
	}
	if got, w := recordsLine(logged), recordsLine(want); got != w {
		t.Fatalf("records from the log:\n%s\nwant\n%s", got, w)
	}
	var hist []changestream.Record
	for _, s := range spans {
		recs, err := e.SpanHistory(m, s.Start, s.End)
		if err != nil {
			t.Fatal(err)
		}
		hist = append(hist, recs...)
	}
	back, err := UnmarshalChanges(MarshalChanges(hist))
	if err != nil {
		t.Fatal(err)
	}
	if got, w := recordsLine(back), recordsLine(want); got != w {
		t.Fatalf("span history through MarshalChanges:\n%s\nwant\n%s", got, w)
	}
	// Imported on another engine, they read back at the same positions.
	dst, _, dm := openStreamed(t)
	if err := dst.ImportChanges(dm, back); err != nil {
		t.Fatal(err)
	}
	if got, w := recordsLine(allChanges(t, dst, dm)), recordsLine(want); got != w {
		t.Fatalf("imported:\n%s\nwant\n%s", got, w)
	}
	if _, err := UnmarshalChanges([]byte{1, 2, 3}); err == nil {
		t.Fatal("a short encoding decoded")
	}
}
