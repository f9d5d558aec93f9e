package bench

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/storage"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The tests' workloads append a few KB: zero-filling the default 128 MiB
// ahead cost each ceiling-wal start 0.8 s.
func init() { walPrealloc = 1 << 20 }

// TestCeilingWALWrites checks the ceiling-wal target appends every
// MutateRows and MutateRow call's request to its log, undecoded: the
// records decode to requests of their kind that hold every written cell
// once, with its row, qualifier and value, one MutateRow per point write,
// and nothing else follows them but the zeros written ahead. (The
// client's ApplyBulk checks each row's answer: a miscounted response
// fails Writes.)
func TestCeilingWALWrites(t *testing.T) {
	t.Parallel()
	cfg := Config{Table: "t", Rows: 250, BatchSize: 40, Workers: 3, PointWrites: 30, Seed: 5}
	dir := writeThroughCeiling(t, cfg, StartCeilingWAL)
	data, err := os.ReadFile(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < walPrealloc {
		t.Fatalf("log is %d bytes, want it zero-filled to %d", len(data), walPrealloc)
	}
	pool := newValuePool(cfg.withDefaults())
	want := map[string][]byte{}
	for i := range cfg.Rows + cfg.PointWrites {
		want[cfg.Key(i)] = pool.value(i)
	}
	seen := map[string]bool{}
	check := func(row string, muts []*btpb.Mutation) {
		t.Helper()
		sc := muts[0].GetSetCell()
		if len(muts) != 1 || sc.GetColumnQualifier() == nil || string(sc.GetColumnQualifier()) != "c" ||
			!bytes.Equal(sc.GetValue(), want[row]) || seen[row] {
			t.Fatalf("row %q: %v (seen before: %v), want value %x", row, muts, seen[row], want[row])
		}
		seen[row] = true
	}
	single := 0
	for calls := 0; len(seen) < cfg.Rows+cfg.PointWrites; calls++ {
		if len(data) == 0 {
			t.Fatalf("log ends after %d calls", calls)
		}
		kind := data[0]
		n, k := binary.Uvarint(data[1:])
		if k <= 0 || n == 0 || uint64(len(data)-1-k) < n {
			t.Fatalf("log ends after %d calls, %d of %d cells", calls, len(seen), cfg.Rows+cfg.PointWrites)
		}
		rec := data[1+k : 1+k+int(n)]
		data = data[1+k+int(n):]
		switch kind {
		case recMutateRows:
			var req btpb.MutateRowsRequest
			if err := proto.Unmarshal(rec, &req); err != nil {
				t.Fatalf("record %d: %v", calls, err)
			}
			for _, e := range req.GetEntries() {
				check(string(e.GetRowKey()), e.GetMutations())
			}
		case recMutateRow:
			var req btpb.MutateRowRequest
			if err := proto.Unmarshal(rec, &req); err != nil {
				t.Fatalf("record %d: %v", calls, err)
			}
			check(string(req.GetRowKey()), req.GetMutations())
			single++
		default:
			t.Fatalf("record %d: kind %d", calls, kind)
		}
	}
	if single != cfg.PointWrites {
		t.Fatalf("%d MutateRow records, want %d", single, cfg.PointWrites)
	}
	if len(bytes.Trim(data, "\x00")) != 0 {
		t.Fatal("the log holds more than the written calls")
	}
}

// TestFloorMutateRowRefusesBadBytes: a MutateRow whose bytes do not parse
// gets Internal from ceiling-wal and ceiling-pebble, as a MutateRows does,
// and nothing is written: the log stays zeros, Pebble holds no cell.
func TestFloorMutateRowRefusesBadBytes(t *testing.T) {
	t.Parallel()
	good, err := proto.Marshal(&btpb.MutateRowRequest{TableName: "t", RowKey: []byte("r"), Mutations: []*btpb.Mutation{
		{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{FamilyName: "f", ColumnQualifier: []byte("c"), Value: []byte("v")}}}}})
	if err != nil {
		t.Fatal(err)
	}
	bad := good[:len(good)-1]
	dec := func(b []byte) func(any) error {
		return func(v any) error { v.(*rawMsg).b = b; return nil }
	}
	dir := t.TempDir()
	l, err := openGroupLog(filepath.Join(dir, "wal"), 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	db, err := storage.Open(storage.Options{Dir: filepath.Join(dir, "pebble")})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cells := func() int {
		it, err := db.NewIter(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		n := 0
		for it.First(); it.Valid(); it.Next() {
			if _, err := storage.DecodeCellKey(it.Key()); err == nil {
				n++
			}
		}
		return n
	}
	for _, s := range []*ceilingServer{{wal: l}, {db: db}} {
		if _, err := s.floorMutateRow(dec(bad)); status.Code(err) != codes.Internal {
			t.Fatalf("a truncated MutateRow: %v, want Internal", err)
		}
		if l.appends != 0 || cells() != 0 {
			t.Fatalf("a refused MutateRow wrote: %d appends, %d cells", l.appends, cells())
		}
	}
	// The same request whole is written, once by each.
	for _, s := range []*ceilingServer{{wal: l}, {db: db}} {
		if resp, err := s.floorMutateRow(dec(good)); err != nil || len(resp.(*rawMsg).b) != 0 {
			t.Fatalf("MutateRow: %v, %v; want an empty response", resp, err)
		}
	}
	if l.appends != 1 || cells() != 1 {
		t.Fatalf("a MutateRow wrote %d appends, %d cells; want 1 and 1", l.appends, cells())
	}
}

// TestFloorCodecAnswers checks the floor servers' hand-made pieces against
// protobuf: countEntries and forEachSetCell find the entries and SetCells
// protobuf encoded, and refuse truncated bytes; okEntries decodes to
// entries 0..n-1, each OK.
func TestFloorCodecAnswers(t *testing.T) {
	req := &btpb.MutateRowsRequest{TableName: "projects/p/instances/i/tables/t", AppProfileId: "a"}
	for i := range 7 {
		e := &btpb.MutateRowsRequest_Entry{RowKey: []byte{byte(i)},
			Mutations: []*btpb.Mutation{{Mutation: &btpb.Mutation_DeleteFromRow_{DeleteFromRow: &btpb.Mutation_DeleteFromRow{}}}}}
		if i%2 == 0 { // a SetCell after the delete, in every other entry
			e.Mutations = append(e.Mutations, &btpb.Mutation{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{
				FamilyName: "f", ColumnQualifier: fmt.Appendf(nil, "q%d", i), TimestampMicros: int64(i - 1000), Value: fmt.Appendf(nil, "v%d", i)}}})
		}
		req.Entries = append(req.Entries, e)
	}
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var cells []string
	n, err := forEachSetCell(b, func(row, qual []byte, ts int64, value []byte) error {
		cells = append(cells, fmt.Sprintf("%x/%s/%d/%s", row, qual, ts, value))
		return nil
	})
	if want := "[00/q0/-1000/v0 02/q2/-998/v2 04/q4/-996/v4 06/q6/-994/v6]"; n != 7 || err != nil || fmt.Sprint(cells) != want {
		t.Fatalf("forEachSetCell = %d, %v, %v; want 7, %s", n, err, cells, want)
	}
	if _, err := forEachSetCell(b[:len(b)-1], func([]byte, []byte, int64, []byte) error { return nil }); err == nil {
		t.Fatal("forEachSetCell took a truncated request")
	}
	// A MutateRowRequest: its row key and mutations are fields 2 and 3.
	one := &btpb.MutateRowRequest{TableName: req.TableName, RowKey: []byte("row"), Mutations: req.Entries[2].Mutations, AppProfileId: "a"}
	ob, err := proto.Marshal(one)
	if err != nil {
		t.Fatal(err)
	}
	cells = nil
	err = rowSetCells(ob, 2, 3, func(row, qual []byte, ts int64, value []byte) error {
		cells = append(cells, fmt.Sprintf("%s/%s/%d/%s", row, qual, ts, value))
		return nil
	})
	if want := "[row/q2/-998/v2]"; err != nil || fmt.Sprint(cells) != want {
		t.Fatalf("rowSetCells = %v, %v; want %s", err, cells, want)
	}
	if err := rowSetCells(ob[:len(ob)-1], 2, 3, func([]byte, []byte, int64, []byte) error { return nil }); err == nil {
		t.Fatal("rowSetCells took a truncated request")
	}
	if n, err := countEntries(b); n != 7 || err != nil {
		t.Fatalf("countEntries = %d, %v; want 7", n, err)
	}
	if _, err := countEntries(b[:len(b)-1]); err == nil {
		t.Fatal("countEntries took a truncated request")
	}
	for _, n := range []int{0, 1, 200} {
		var resp btpb.MutateRowsResponse
		if err := proto.Unmarshal(okEntries(n), &resp); err != nil {
			t.Fatal(err)
		}
		if len(resp.GetEntries()) != n {
			t.Fatalf("okEntries(%d): %d entries", n, len(resp.GetEntries()))
		}
		for i, e := range resp.GetEntries() {
			if e.GetIndex() != int64(i) || e.GetStatus() == nil || e.GetStatus().GetCode() != 0 {
				t.Fatalf("okEntries(%d): entry %d is %v", n, i, e)
			}
		}
	}
}

// TestGroupLogWaitsForSync checks an append returns only after a sync that
// began after it, and that appends arriving during a sync share the next.
func TestGroupLogWaitsForSync(t *testing.T) {
	t.Parallel()
	l, err := openGroupLog(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	started, release := make(chan int, 10), make(chan struct{})
	l.sync = func(*os.File) error {
		started <- 1
		<-release
		return nil
	}
	add := func(b []byte) []byte { return append(b, 'x') }
	first := make(chan error, 1)
	go func() { first <- l.append(add) }()
	<-started // the first append's sync is running
	const n = 10
	var wg sync.WaitGroup
	rest := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() { defer wg.Done(); rest <- l.append(add) }()
	}
	// Wait until all n have appended (they then wait for a sync).
	for {
		l.mu.Lock()
		a := l.appends
		l.mu.Unlock()
		if a == n+1 {
			break
		}
		runtime.Gosched()
	}
	select {
	case err := <-first:
		t.Fatalf("append returned (%v) before its sync did", err)
	case err := <-rest:
		t.Fatalf("append returned (%v) before any sync covering it", err)
	default:
	}
	release <- struct{}{}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	<-started // the others' one shared sync
	select {
	case err := <-rest:
		t.Fatalf("append returned (%v) before the sync covering it", err)
	default:
	}
	release <- struct{}{}
	wg.Wait()
	for range n {
		if err := <-rest; err != nil {
			t.Fatal(err)
		}
	}
	if l.syncs != 2 {
		t.Fatalf("%d syncs, want 2 (one, then one shared by the %d appends that arrived during it)", l.syncs, n)
	}
	got, err := os.ReadFile(l.f.Name())
	if err != nil || string(got) != string(bytes.Repeat([]byte("x"), n+1)) {
		t.Fatalf("log %q (%v), want %d x", got, err, n+1)
	}
}
