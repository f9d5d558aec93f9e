package table_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/collector"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
)

var spanStart = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

const spanTableID = 7

// spanSpec is the moved table: f keeps everything, a keeps an hour, t
// holds cells with a native expiry.
func spanSpec() table.TableSpec {
	return table.TableSpec{ID: spanTableID, Families: []table.FamilySpec{
		{Name: "f"}, {Name: "a", GC: gcrule.MaxAge(time.Hour)}, {Name: "t"},
	}}
}

type spanNode struct {
	eng *table.Engine
	dir string
}

func openSpanNode(t *testing.T, dir string, store storage.ObjectStore, creator uint64, clk clock.Clock, fs vfs.FS) *table.Engine {
	t.Helper()
	opts := table.Options{Dir: dir, Clock: clk, Logger: slog.New(slog.DiscardHandler), Visibility: table.UntilCollected,
		Shared: &storage.SharedOptions{Store: store, Locator: "shared", CreatorID: creator, SecondaryCacheBytes: -1}}
	if fs != nil {
		opts = table.WithFS(opts, fs)
	}
	e, err := table.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// openSpanPair opens two engines (creator ids 1 and 2) on one shared
// directory store and a fake clock at spanStart; all close at cleanup.
func openSpanPair(t *testing.T) (src, dst *table.Engine, clk *clock.Fake) {
	t.Helper()
	root := t.TempDir()
	store, err := storage.SharedDir(filepath.Join(root, "shared"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	clk = clock.NewFake(spanStart)
	src = openSpanNode(t, filepath.Join(root, "a"), store, 1, clk, nil)
	t.Cleanup(func() { src.Close() })
	dst = openSpanNode(t, filepath.Join(root, "b"), store, 2, clk, nil)
	t.Cleanup(func() { dst.Close() })
	return src, dst, clk
}

func spanRow(i int) []byte { return []byte(fmt.Sprintf("row%06d", i)) }

// writeSpanCells writes rows [0, rows) with perRow cells each in family f
// (value row/qualifier/timestamp), and in rows [expFrom, rows) one cell in
// a, written an hour before it expires by age, and one in t expiring in
// an hour.
func writeSpanCells(t *testing.T, e *table.Engine, rows, perRow, expFrom int, now time.Time) {
	t.Helper()
	ts := now.UnixMicro() / 1000 * 1000
	var batch []table.RowMutation
	flush := func() {
		errs, err := e.MutateRows("i", "t", batch)
		if err != nil {
			t.Fatal(err)
		}
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		batch = batch[:0]
	}
	for i := 0; i < rows; i++ {
		var muts []table.Mutation
		for q := 0; q < perRow; q++ {
			muts = append(muts, table.Mutation{Kind: table.SetCell, Family: "f", Qualifier: []byte{byte('a' + q)}, Timestamp: ts,
				Value: []byte(fmt.Sprintf("%s/%d", spanRow(i), q))})
		}
		if i >= expFrom {
			muts = append(muts,
				table.Mutation{Kind: table.SetCell, Family: "a", Qualifier: []byte("q"), Timestamp: ts, Value: []byte("aging")},
				table.Mutation{Kind: table.SetCell, Family: "t", Qualifier: []byte("q"), Timestamp: ts, Value: []byte("expiring"),
					ExpireAt: now.Add(time.Hour).UnixMicro()})
		}
		batch = append(batch, table.RowMutation{Row: spanRow(i), Mutations: muts})
		if len(batch) == 500 {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
}

// readSpan reads rows [start, end) and counts cells by family, checking
// every f value.
func readSpan(t *testing.T, e *table.Engine, start, end []byte) (rows int, byFamily map[string]int) {
	t.Helper()
	byFamily = map[string]int{}
	err := e.ReadRows(context.Background(), "i", "t", table.ReadRequest{Ranges: []table.RowRange{{Start: start, End: end}}}, func(r cell.Row) error {
		rows++
		for _, c := range r.Cells {
			byFamily[c.Family]++
			if c.Family == "f" {
				want := fmt.Sprintf("%s/%d", r.Key, c.Qualifier[0]-'a')
				if string(c.Value) != want {
					return fmt.Errorf("row %s: f:%s = %q, want %q", r.Key, c.Qualifier, c.Value, want)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return rows, byFamily
}

// storedCells counts the cells stored (expired ones too) by family.
func storedCells(t *testing.T, e *table.Engine) map[string]int {
	t.Helper()
	m, err := e.Table("i", "t")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	if err := e.RawCells(m, nil, nil, func(c table.RawCell) error { out[c.Family]++; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func compactAll(t *testing.T, e *table.Engine) {
	t.Helper()
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := e.Compact(context.Background(), []byte{0}, []byte{0xff}); err != nil {
		t.Fatal(err)
	}
}

func createSpanTable(t *testing.T, engines ...*table.Engine) {
	t.Helper()
	for _, e := range engines {
		if _, err := e.CreateTable("i", "t", spanSpec()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSpanMoveShared moves half of a compacted table of 100k cells between
// two engines on one shared directory: one SSTable reference travels and
// no key; the target reads every cell, the source keeps only its half
// after the excise, and the target's collector collects the moved span's
// expired cells on its first pass after they expire.
// spanSharedRows is how many rows of ten cells TestSpanMoveShared writes
// (half move). The default keeps the suite short; -span.rows=10000 is the
// 100,000-cell run.
var spanSharedRows = flag.Int("span.rows", 2000, "TestSpanMoveShared: rows of ten cells to write (half move)")

func TestSpanMoveShared(t *testing.T) {
	if testing.Short() {
		t.Skip("writes many cells")
	}
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	store, err := storage.SharedDir(filepath.Join(root, "shared"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	clk := clock.NewFake(spanStart)
	src := openSpanNode(t, filepath.Join(root, "a"), store, 1, clk, nil)
	defer src.Close()
	dst := openSpanNode(t, filepath.Join(root, "b"), store, 2, clk, nil)
	defer func() { dst.Close() }()
	createSpanTable(t, src, dst)

	rows, perRow := *spanSharedRows, 10
	half := rows / 2
	writeSpanCells(t, src, rows, perRow, half, spanStart)
	compactAll(t, src)
	lo, hi := spanRow(half), []byte(nil)

	if local, shared, err := src.SpanDiskUsage("i", "t", lo, hi); err != nil || local != 0 || shared < 100<<10 {
		t.Errorf("span disk usage after a full compaction: local %d, shared %d (%v); want all shared", local, shared, err)
	}
	x, err := src.ExportSpan(ctx, "i", "t", lo, hi)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	st := x.Stats()
	t.Logf("export: %+v", st)
	if st.LocalKeys != 0 || st.LocalBytes != 0 {
		t.Errorf("after a full compaction the export copied %d local keys (%d bytes), want none", st.LocalKeys, st.LocalBytes)
	}
	if st.SharedSSTs == 0 {
		t.Errorf("the export references no shared SSTable")
	}
	if st.AgendaEntries != half {
		t.Errorf("the export carries %d agenda entries, want %d (one native expiry per row)", st.AgendaEntries, half)
	}
	enc, err := x.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// What travels: references (a header) and the agenda entries of the
	// span's rows, no cell.
	if int64(len(enc)) != st.Encoded || st.Encoded > 2048+int64(st.AgendaEntries)*16 {
		t.Errorf("encoded export is %d bytes (stats say %d); want the same, and references and agenda entries only", len(enc), st.Encoded)
	}
	y, err := table.UnmarshalSpanExport(enc)
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.IngestSpan(ctx, y); err != nil {
		t.Fatal(err)
	}
	x.Release()
	if ms := src.MoveStats(); ms.Exports != 1 || ms.BytesShipped != st.Encoded || ms.LocalKeysShipped != 0 {
		t.Errorf("source move stats %+v", ms)
	}

	// The target holds the span, every cell, and nothing else.
	n, fams := readSpan(t, dst, nil, nil)
	if n != half || fams["f"] != half*perRow || fams["a"] != half || fams["t"] != half {
		t.Fatalf("target reads %d rows %v; want %d rows, %d f, %d a, %d t cells", n, fams, half, half*perRow, half, half)
	}
	// The source excises it and keeps the rest.
	if err := src.ExciseSpan(ctx, "i", "t", lo, hi); err != nil {
		t.Fatal(err)
	}
	if n, fams := readSpan(t, src, nil, nil); n != half || fams["f"] != half*perRow || fams["a"] != 0 {
		t.Fatalf("source after excise reads %d rows %v; want rows [0, %d) only", n, fams, half)
	}
	// The target keeps reading the shared SSTable the source let go of,
	// across a restart.
	compactAll(t, src)
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	dst = openSpanNode(t, filepath.Join(root, "b"), store, 2, clk, nil)
	if n, fams := readSpan(t, dst, nil, nil); n != half || fams["f"] != half*perRow {
		t.Fatalf("target after restart reads %d rows %v", n, fams)
	}

	// Expired cells of the moved span: still there (read until
	// collected) an hour later, gone after the target's next pass.
	gc, err := collector.New(dst, collector.Options{Clock: clk, Logger: slog.New(slog.DiscardHandler), Pause: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gc.RunPass(ctx, collector.Selector{}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour + table.AgendaSlack + time.Second)
	if fams := storedCells(t, dst); fams["a"] != half || fams["t"] != half {
		t.Fatalf("before the pass the target stores %v; want the expired cells still there", fams)
	}
	if _, err := gc.RunPass(ctx, collector.Selector{}); err != nil {
		t.Fatal(err)
	}
	if fams := storedCells(t, dst); fams["a"] != 0 || fams["t"] != 0 || fams["f"] != half*perRow {
		t.Fatalf("after the pass the target stores %v; want the a and t cells collected", fams)
	}
}

// TestSpanMoveLocalLevels moves a span whose newest changes are still in
// the source's local levels (L0): sets and deletions that shadow cells in
// the shared levels travel as keys, and the target reads what the source
// read.
func TestSpanMoveLocalLevels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src, dst, _ := openSpanPair(t)
	createSpanTable(t, src, dst)

	writeSpanCells(t, src, 2000, 4, 2000, spanStart)
	compactAll(t, src)
	// Newer changes, over the shared L6: row 1100 loses a
	// column, rows 1200–1209 go whole, row 1300 gains a version.
	if err := src.MutateRow("i", "t", spanRow(1100), []table.Mutation{{Kind: table.DeleteFromColumn, Family: "f", Qualifier: []byte("a")}}); err != nil {
		t.Fatal(err)
	}
	if err := src.DropRowRange("i", "t", []byte("row00120"), false); err != nil {
		t.Fatal(err)
	}
	if err := src.MutateRow("i", "t", spanRow(1300), []table.Mutation{{Kind: table.SetCell, Family: "f", Qualifier: []byte("a"),
		Timestamp: spanStart.Add(time.Second).UnixMicro(), Value: []byte("row001300/0")}}); err != nil {
		t.Fatal(err)
	}
	// A row outside the span, also in the memtable: it must not travel.
	if err := src.MutateRow("i", "t", spanRow(10), []table.Mutation{{Kind: table.DeleteFromRow}}); err != nil {
		t.Fatal(err)
	}
	lo, hi := spanRow(1000), spanRow(1500)
	wantRows, wantFams := readSpan(t, src, lo, hi)
	if err := src.Flush(); err != nil { // the changes go to L0, local
		t.Fatal(err)
	}
	local, _, err := src.SpanDiskUsage("i", "t", lo, hi)
	if err != nil || local == 0 {
		t.Fatalf("span disk usage: local %d (%v); want the flushed changes", local, err)
	}

	x, err := src.ExportSpan(ctx, "i", "t", lo, hi)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	st := x.Stats()
	t.Logf("export: %+v", st)
	// What travels of the cells is no more than the span's share of the
	// local levels, plus one SSTable's fixed cost (footer, index and
	// properties blocks: about 1 KB).
	if st.LocalKeys == 0 || st.LocalKeys > 20 || uint64(st.LocalBytes) > local+2048 {
		t.Errorf("export copied %d local keys, %d bytes; want the few changes in the span, no more than the %d bytes of its local levels and an SSTable's overhead", st.LocalKeys, st.LocalBytes, local)
	}
	enc, _ := x.Marshal()
	y, err := table.UnmarshalSpanExport(enc)
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.IngestSpan(ctx, y); err != nil {
		t.Fatal(err)
	}
	gotRows, gotFams := readSpan(t, dst, nil, nil)
	if gotRows != wantRows || fmt.Sprint(gotFams) != fmt.Sprint(wantFams) {
		t.Fatalf("target reads %d rows %v; source read %d rows %v", gotRows, gotFams, wantRows, wantFams)
	}
	if wantRows != 490 || wantFams["f"] != 490*4 {
		t.Fatalf("source reads %d rows %v in the span; want 490 rows and %d f cells", wantRows, wantFams, 490*4)
	}
	// Ingesting again replaces the span: same reads.
	if err := dst.IngestSpan(ctx, y); err != nil {
		t.Fatal(err)
	}
	if r, f := readSpan(t, dst, nil, nil); r != wantRows || fmt.Sprint(f) != fmt.Sprint(wantFams) {
		t.Fatalf("after a second ingest the target reads %d rows %v", r, f)
	}
	// An empty span moves too (nothing but the excise), and clears what
	// the target held there.
	if err := src.DropRowRange("i", "t", []byte("row001400"), false); err != nil {
		t.Fatal(err)
	}
	empty, err := src.ExportSpan(ctx, "i", "t", []byte("row001400"), []byte("row001401"))
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Release()
	if err := dst.IngestSpan(ctx, empty); err != nil {
		t.Fatal(err)
	}
	if r, _ := readSpan(t, dst, nil, nil); r != wantRows-1 {
		t.Fatalf("after moving row 1400 emptied, the target reads %d rows, want %d", r, wantRows-1)
	}
}

// TestSpanIngestRefusals: a table with another id, or a family under
// another id, is refused with ErrPrecondition and changes nothing.
func TestSpanIngestRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src, dst, _ := openSpanPair(t)
	createSpanTable(t, src)
	writeSpanCells(t, src, 100, 2, 100, spanStart)
	x, err := src.ExportSpan(ctx, "i", "t", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()

	if err := dst.IngestSpan(ctx, x); !errors.Is(err, table.ErrTableNotFound) {
		t.Errorf("ingest without the table: %v, want ErrTableNotFound", err)
	}
	spec := spanSpec()
	spec.ID = 0
	if _, err := dst.CreateTable("i", "t", spec); err != nil {
		t.Fatal(err)
	}
	if err := dst.IngestSpan(ctx, x); !errors.Is(err, table.ErrPrecondition) {
		t.Errorf("ingest into a table of another id: %v, want ErrPrecondition", err)
	}
	if err := dst.DeleteTable("i", "t"); err != nil {
		t.Fatal(err)
	}
	spec = spanSpec()
	spec.Families = append(spec.Families, table.FamilySpec{Name: "b"}) // shifts the ids of f and t
	if _, err := dst.CreateTable("i", "t", spec); err != nil {
		t.Fatal(err)
	}
	if err := dst.IngestSpan(ctx, x); !errors.Is(err, table.ErrPrecondition) {
		t.Errorf("ingest with other family ids: %v, want ErrPrecondition", err)
	}
	if n, _ := readSpan(t, dst, nil, nil); n != 0 {
		t.Errorf("refused ingests left %d rows", n)
	}
	// An id a table holds is refused.
	spec = spanSpec()
	if _, err := dst.CreateTable("i", "u", spec); !errors.Is(err, table.ErrPrecondition) {
		t.Errorf("second table with id %d: %v, want ErrPrecondition", spanTableID, err)
	}
	if _, err := table.UnmarshalSpanExport([]byte("nonsense")); !errors.Is(err, table.ErrInvalid) {
		t.Errorf("unmarshal nonsense: %v, want ErrInvalid", err)
	}
	if _, err := src.ExportSpan(ctx, "i", "t", []byte("b"), []byte("a")); !errors.Is(err, table.ErrInvalid) {
		t.Errorf("export of an empty range: %v, want ErrInvalid", err)
	}
}

// crashStore is an engine's view of the shared store that dies with it: a
// crashed engine (whose files a CrashClone froze) must not go on writing or
// deleting shared objects while the test closes it.
type crashStore struct {
	storage.ObjectStore
	dead atomic.Bool
}

var errCrashed = errors.New("crashed")

func (c *crashStore) crash() { c.dead.Store(true) }

func (c *crashStore) CreateObject(name string) (io.WriteCloser, error) {
	if c.dead.Load() {
		return nil, errCrashed
	}
	return c.ObjectStore.CreateObject(name)
}

func (c *crashStore) Delete(name string) error {
	if c.dead.Load() {
		return errCrashed
	}
	return c.ObjectStore.Delete(name)
}

// TestSpanMoveCrash: a crash of either side at any step of a move leaves
// the span whole with an owner: the source changes nothing before its
// excise, the target's ingest is all or nothing.
func TestSpanMoveCrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	store, err := storage.SharedDir(filepath.Join(root, "shared"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	clk := clock.NewFake(spanStart)
	srcFS, dstFS := vfs.NewCrashableMem(), vfs.NewCrashableMem()
	srcStore, dstStore := &crashStore{ObjectStore: store}, &crashStore{ObjectStore: store}
	src := openSpanNode(t, "/a", srcStore, 1, clk, srcFS)
	dst := openSpanNode(t, "/b", dstStore, 2, clk, dstFS)
	createSpanTable(t, src, dst)
	writeSpanCells(t, src, 3000, 3, 3000, spanStart)
	compactAll(t, src)
	writeSpanCells(t, src, 3000, 3, 3000, spanStart) // the same cells again, in the memtable
	lo, hi := spanRow(1000), spanRow(2000)

	x, err := src.ExportSpan(ctx, "i", "t", lo, hi)
	if err != nil {
		t.Fatal(err)
	}
	// The source crashes after the export: it comes back whole.
	srcFS2 := srcFS.CrashClone(vfs.CrashCloneCfg{})
	srcStore.crash()
	x.Release()
	src.Close()
	srcStore = &crashStore{ObjectStore: store}
	src = openSpanNode(t, "/a", srcStore, 1, clk, srcFS2)
	defer func() { src.Close() }()
	if n, fams := readSpan(t, src, nil, nil); n != 3000 || fams["f"] != 9000 {
		t.Fatalf("source after a crash reads %d rows %v", n, fams)
	}
	// The move starts over; the target crashes right after its ingest.
	x, err = src.ExportSpan(ctx, "i", "t", lo, hi)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	enc, _ := x.Marshal()
	y, _ := table.UnmarshalSpanExport(enc)
	if err := dst.IngestSpan(ctx, y); err != nil {
		t.Fatal(err)
	}
	dstFS2 := dstFS.CrashClone(vfs.CrashCloneCfg{})
	dstStore.crash()
	dst.Close()
	dst = openSpanNode(t, "/b", store, 2, clk, dstFS2)
	defer func() { dst.Close() }()
	if n, fams := readSpan(t, dst, nil, nil); n != 1000 || fams["f"] != 3000 {
		t.Fatalf("target after a crash reads %d rows %v; want the whole span", n, fams)
	}
	// The source excises and crashes: the span is gone from it, the rest
	// stays, and the target still reads it.
	if err := src.ExciseSpan(ctx, "i", "t", lo, hi); err != nil {
		t.Fatal(err)
	}
	x.Release()
	srcFS3 := srcFS2.CrashClone(vfs.CrashCloneCfg{})
	srcStore.crash()
	src.Close()
	src = openSpanNode(t, "/a", store, 1, clk, srcFS3)
	if n, _ := readSpan(t, src, lo, hi); n != 0 {
		t.Errorf("source after excise and crash reads %d rows of the span", n)
	}
	if n, _ := readSpan(t, src, nil, nil); n != 2000 {
		t.Errorf("source after excise and crash reads %d rows, want 2000", n)
	}
	compactAll(t, src)
	if n, fams := readSpan(t, dst, nil, nil); n != 1000 || fams["f"] != 3000 {
		t.Fatalf("target after the source let go reads %d rows %v", n, fams)
	}
}

// TestSpanSplitKey: the split key of a span halves its size, whether the
// span lies in memtables or in SSTables; ApproxSpanSize sees the shared
// levels.
func TestSpanSplitKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	store, err := storage.SharedDir(filepath.Join(root, "shared"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	clk := clock.NewFake(spanStart)
	e := openSpanNode(t, filepath.Join(root, "a"), store, 1, clk, nil)
	defer e.Close()
	createSpanTable(t, e)
	if k, err := e.SpanSplitKey(ctx, "i", "t", nil, nil); err != nil || k != nil {
		t.Fatalf("split key of an empty table: %q, %v", k, err)
	}
	writeSpanCells(t, e, 4000, 4, 4000, spanStart)
	check := func(what string) {
		k, err := e.SpanSplitKey(ctx, "i", "t", spanRow(1000), spanRow(3000))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Compare(k, spanRow(1800)) < 0 || bytes.Compare(k, spanRow(2200)) > 0 {
			t.Errorf("%s: split key of rows [1000, 3000) is %q, want near row002000", what, k)
		}
	}
	check("memtable")
	compactAll(t, e)
	check("shared SSTables")
	all, err := e.ApproxSpanSize("i", "t", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	part, err := e.ApproxSpanSize("i", "t", spanRow(0), spanRow(2000))
	if err != nil {
		t.Fatal(err)
	}
	if all < 100<<10 || part > all*3/5 || part < all*2/5 {
		t.Errorf("sizes: all %d, first half %d", all, part)
	}
}

// TestSpanMoveUnshared: spans move between engines without shared storage,
// and from an engine whose lower levels were written before it had shared
// storage: every key is copied then, and the target reads what the source
// read.
func TestSpanMoveUnshared(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	clk := clock.NewFake(spanStart)
	open := func(dir string, shared storage.ObjectStore, creator uint64) *table.Engine {
		opts := table.Options{Dir: filepath.Join(root, dir), Clock: clk, Logger: slog.New(slog.DiscardHandler)}
		if shared != nil {
			opts.Shared = &storage.SharedOptions{Store: shared, CreatorID: creator}
		}
		e, err := table.Open(opts)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	src, dst := open("a", nil, 0), open("b", nil, 0)
	createSpanTable(t, src, dst)
	writeSpanCells(t, src, 1000, 3, 1000, spanStart)
	compactAll(t, src)
	move := func(src, dst *table.Engine) table.SpanStats {
		x, err := src.ExportSpan(ctx, "i", "t", spanRow(200), spanRow(700))
		if err != nil {
			t.Fatal(err)
		}
		defer x.Release()
		enc, _ := x.Marshal()
		y, err := table.UnmarshalSpanExport(enc)
		if err != nil {
			t.Fatal(err)
		}
		if err := dst.IngestSpan(ctx, y); err != nil {
			t.Fatal(err)
		}
		if n, fams := readSpan(t, dst, spanRow(200), spanRow(700)); n != 500 || fams["f"] != 1500 {
			t.Fatalf("target reads %d rows %v", n, fams)
		}
		return x.Stats()
	}
	if st := move(src, dst); st.SharedSSTs != 0 || st.LocalKeys < 1500 || st.LocalKeys > 1501 {
		t.Errorf("unshared move: %+v; want the 1500 cells copied (and the range deletion a table creation leaves)", st)
	}
	// The source turns shared storage on: its L6 stays local until
	// rewritten, so the export copies.
	src.Close()
	store, err := storage.SharedDir(filepath.Join(root, "shared"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	src = open("a", store, 1)
	defer src.Close()
	dst2 := open("c", store, 2)
	defer dst2.Close()
	createSpanTable(t, dst2)
	// (A background compaction after the reopen may already have
	// rewritten the span into shared SSTables: then it moves by reference.)
	if st := move(src, dst2); st.SharedSSTs == 0 && (st.LocalKeys < 1500 || st.LocalKeys > 1501) {
		t.Errorf("move off local lower levels: %+v; want the 1500 cells copied (and the range deletion a table creation leaves)", st)
	}
	dst.Close()
}
