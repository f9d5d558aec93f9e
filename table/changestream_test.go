package table

import (
	"errors"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
)

const testInst = "projects/p/instances/i"

func openStreamed(t *testing.T) (*Engine, *clock.Fake, *Meta) {
	t.Helper()
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e, err := Open(Options{Dir: t.TempDir(), Clock: fake})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	m, err := e.CreateTable(testInst, "t", TableSpec{
		Families:              []FamilySpec{{Name: "cf", GC: gcrule.MustParse("never")}, {Name: "sum", Aggregate: AggSum}},
		ChangeStreamRetention: 24 * time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	return e, fake, m
}

func allChanges(t *testing.T, e *Engine, m *Meta) []changestream.Record {
	t.Helper()
	b, err := e.ReadChanges(m, changestream.TableStart(m.ID), 0)
	if err != nil {
		t.Fatal(err)
	}
	return b.Records
}

func TestChangeStreamRecordsEveryUserWrite(t *testing.T) {
	e, fake, m := openStreamed(t)
	now := clock.MillisTruncated(fake.Now())
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(e.MutateRow(testInst, "t", []byte("r1"), []Mutation{
		{Kind: SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: ServerTimestamp, Value: []byte("v1")},
		{Kind: DeleteFromColumn, Family: "cf", Qualifier: []byte("old"), StartTS: 1000, EndTS: 2000},
	}))
	// A failed write records nothing.
	if err := e.MutateRow(testInst, "t", []byte("r1"), []Mutation{{Kind: SetCell, Family: "nope", Value: []byte("x")}}); !errors.Is(err, ErrFamilyNotFound) {
		t.Fatalf("bad family: %v", err)
	}
	errs, err := e.MutateRows(testInst, "t", []RowMutation{
		{Row: []byte("a"), Mutations: []Mutation{{Kind: SetCell, Family: "cf", Timestamp: 5000, Value: []byte("x")}}},
		{Row: []byte("bad"), Mutations: []Mutation{{Kind: SetCell, Family: "cf", Timestamp: 5001, Value: []byte("x")}}},
		{Row: []byte("b"), Mutations: []Mutation{{Kind: DeleteFromRow}}},
	})
	must(err)
	if errs[1] == nil {
		t.Fatal("sub-millisecond timestamp accepted")
	}
	must(e.MutateRow(testInst, "t", []byte("c"), []Mutation{{Kind: AddToCell, Family: "sum", Timestamp: 0, IntInput: 2}}))
	must(e.MutateRow(testInst, "t", []byte("c"), []Mutation{{Kind: AddToCell, Family: "sum", Timestamp: 0, IntInput: 3}}))
	if _, err := e.CheckAndMutate(testInst, "t", []byte("r1"), nil, []Mutation{{Kind: DeleteFromFamily, Family: "cf"}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ReadModifyWrite(testInst, "t", []byte("n"), []RMWRule{{Family: "cf", Qualifier: []byte("q"), Increment: 1}}); err != nil {
		t.Fatal(err)
	}
	must(e.DropRowRange(testInst, "t", []byte("n"), false))

	recs := allChanges(t, e, m)
	type want struct {
		row    string
		reason string
		kinds  []changestream.ModKind
	}
	wants := []want{
		{"r1", "user", []changestream.ModKind{changestream.SetCell, changestream.DeleteFromColumn}},
		{"a", "user", []changestream.ModKind{changestream.SetCell}},
		{"b", "user", []changestream.ModKind{changestream.DeleteFromRow}},
		{"c", "user", []changestream.ModKind{changestream.SetCell}},
		{"c", "user", []changestream.ModKind{changestream.SetCell}},
		{"r1", "user", []changestream.ModKind{changestream.DeleteFromFamily}},
		{"n", "user", []changestream.ModKind{changestream.SetCell}},
		{"n", "drop-row-range", []changestream.ModKind{changestream.DeleteFromRow}},
	}
	if len(recs) != len(wants) {
		t.Fatalf("got %d records, want %d: %+v", len(recs), len(wants), recs)
	}
	for i, w := range wants {
		r := recs[i]
		if string(r.RowKey) != w.row || r.Reason != w.reason || r.Type != changestream.User || r.IsSystem {
			t.Errorf("record %d: %+v, want %+v", i, r, w)
		}
		if len(r.Mods) != len(w.kinds) {
			t.Errorf("record %d mods %+v", i, r.Mods)
			continue
		}
		for j, k := range w.kinds {
			if r.Mods[j].Kind != k {
				t.Errorf("record %d mod %d kind %v, want %v", i, j, r.Mods[j].Kind, k)
			}
		}
		if i > 0 && !recs[i-1].Position.Less(r.Position) {
			t.Errorf("record %d at %v not after %v", i, r.Position, recs[i-1].Position)
		}
	}
	if m0 := recs[0].Mods[0]; m0.Timestamp != now || string(m0.Value) != "v1" || m0.Family != "cf" {
		t.Errorf("server timestamp not resolved in record: %+v", m0)
	}
	if d := recs[0].Mods[1]; d.StartTS != 1000 || d.EndTS != 2000 {
		t.Errorf("delete range %+v", d)
	}
	// MutateRows entries share a commit and differ by index.
	if recs[1].Commit != recs[2].Commit || recs[1].Index != 0 || recs[2].Index != 1 {
		t.Errorf("MutateRows records at %v and %v", recs[1].Position, recs[2].Position)
	}
	// Aggregates record the value they produced.
	if v := recs[4].Mods[0].Value; len(v) != 8 || v[7] != 5 {
		t.Errorf("AddToCell recorded %x, want the sum 5", v)
	}
	if recs[7].TransactionTag != changestream.TagDropRowRange {
		t.Errorf("drop-row-range tag %q", recs[7].TransactionTag)
	}
}

func TestChangeStreamOffDisableAndDeleteTable(t *testing.T) {
	e, _, m := openStreamed(t)
	if _, err := e.CreateTable(testInst, "plain", TableSpec{Families: []FamilySpec{{Name: "cf"}}}); err != nil {
		t.Fatal(err)
	}
	pm, _ := e.Table(testInst, "plain")
	set := func(tbl string) {
		if err := e.MutateRow(testInst, tbl, []byte("r"), []Mutation{{Kind: SetCell, Family: "cf", Timestamp: 1000, Value: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
	}
	set("plain")
	set("t")
	if n := len(allChanges(t, e, pm)); n != 0 {
		t.Errorf("table without a stream has %d records", n)
	}
	for _, bad := range []time.Duration{time.Hour, 8 * 24 * time.Hour} {
		if _, err := e.SetChangeStream(testInst, "t", bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("retention %v: %v", bad, err)
		}
	}
	if _, err := e.SetChangeStream(testInst, "t", 0); err != nil {
		t.Fatal(err)
	}
	if n := len(allChanges(t, e, m)); n != 0 {
		t.Errorf("disabled stream kept %d records", n)
	}
	m2, err := e.SetChangeStream(testInst, "t", 48*time.Hour)
	if err != nil || m2.ChangeStream.Retention != 48*time.Hour {
		t.Fatal(m2, err)
	}
	set("t")
	if n := len(allChanges(t, e, m2)); n != 1 {
		t.Errorf("re-enabled stream has %d records", n)
	}
	if err := e.DeleteTable(testInst, "t"); err != nil {
		t.Fatal(err)
	}
	if n := len(allChanges(t, e, m2)); n != 0 {
		t.Errorf("dropped table left %d records", n)
	}
}

func TestCommitTimestampsIncreaseAndClose(t *testing.T) {
	s := newCommitSeq(0)
	a := s.begin(100)
	b := s.begin(100) // same clock reading: still later
	if b != a+1 {
		t.Fatalf("begin gave %d then %d", a, b)
	}
	if c := s.closed(500); c != a-1 {
		t.Errorf("closed with %d in flight = %d", a, c)
	}
	s.end(b)
	if c := s.closed(500); c != a-1 {
		t.Errorf("closed with %d still in flight = %d", a, c)
	}
	s.end(a)
	if c := s.closed(500); c != 499 {
		t.Errorf("closed with nothing in flight = %d, want now-1", c)
	}
	// The clock steps back: closed time stays closed.
	if ts := s.begin(10); ts <= 499 {
		t.Errorf("commit at %d after 499 was closed", ts)
	}
}

func TestCommitTimestampsSurviveRestart(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	dir := t.TempDir()
	e, err := Open(Options{Dir: dir, Clock: fake})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateTable(testInst, "t", TableSpec{Families: []FamilySpec{{Name: "cf"}}, ChangeStreamRetention: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	write := func(e *Engine) {
		if err := e.MutateRow(testInst, "t", []byte("r"), []Mutation{{Kind: SetCell, Family: "cf", Timestamp: 1000, Value: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
	}
	write(e)
	write(e)
	e.Close()
	fake.Advance(-time.Hour) // the clock stepped back while we were down
	e, err = Open(Options{Dir: dir, Clock: fake})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	write(e)
	m, _ := e.Table(testInst, "t")
	recs, err := changestream.Read(changeStore{e.store}, m.ID, changestream.TableStart(m.ID), 1<<62, 0)
	if err != nil || len(recs) != 3 {
		t.Fatal(len(recs), err)
	}
	if !recs[1].Position.Less(recs[2].Position) {
		t.Errorf("record after restart at %v, before %v", recs[2].Position, recs[1].Position)
	}
}

// TestTailingReaderNeverSkipsOrRepeats runs writers against a reader that
// tails the stream from its last position while commits are in flight: the
// reader must see every record exactly once, in order.
func TestTailingReaderNeverSkipsOrRepeats(t *testing.T) {
	t.Parallel()
	e, err := Open(Options{Dir: t.TempDir()}) // the real clock
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	m, err := e.CreateTable(testInst, "t", TableSpec{Families: []FamilySpec{{Name: "cf"}}, ChangeStreamRetention: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Writer a's commits are slow: later commits overtake them.
	e.beforeRecordedCommit = func(recs []changestream.Record) {
		if recs[0].RowKey[0] == 'a' {
			time.Sleep(time.Millisecond)
		}
	}
	const writers, perWriter = 8, 40
	done := make(chan struct{})
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		go func() {
			for i := 0; i < perWriter; i++ {
				row := []byte{byte('a' + w), byte(i)}
				if i%5 == 4 {
					_, err := e.MutateRows(testInst, "t", []RowMutation{
						{Row: row, Mutations: []Mutation{{Kind: SetCell, Family: "cf", Timestamp: 1000, Value: []byte("x")}}},
						{Row: append(row, 'b'), Mutations: []Mutation{{Kind: DeleteFromRow}}},
					})
					errs <- err
					continue
				}
				errs <- e.MutateRow(testInst, "t", row, []Mutation{{Kind: SetCell, Family: "cf", Timestamp: 1000, Value: []byte("x")}})
			}
		}()
	}
	go func() {
		for i := 0; i < writers*perWriter; i++ {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		close(done)
	}()
	seen := map[changestream.Position]bool{}
	var last *changestream.Position
	lower := changestream.TableStart(m.ID)
	read := func() {
		b, err := e.ReadChanges(m, lower, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range b.Records {
			if seen[r.Position] {
				t.Fatalf("record %v read twice", r.Position)
			}
			if last != nil && !last.Less(r.Position) {
				t.Fatalf("record %v after %v", r.Position, *last)
			}
			seen[r.Position] = true
			p := r.Position
			last = &p
			lower = changestream.After(m.ID, p)
		}
	}
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		read()
	}
	for i := 0; i < 100; i++ { // drain
		read()
	}
	want := writers * (perWriter + perWriter/5)
	if len(seen) != want {
		t.Errorf("tailing reader saw %d records, want %d", len(seen), want)
	}
}
