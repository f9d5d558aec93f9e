package objstore

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
)

// TestS3Multipart: an object larger than a part streams as a multipart
// upload and reads back whole.
func TestS3Multipart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := startFakeS3(t, "bkt")
	s := openFake(t, f, "s3://bkt/p")
	w, err := s.CreateObject("big")
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	var want []byte
	for i := 0; i < partSize/len(chunk)+3; i++ {
		for j := range chunk {
			chunk[j] = byte(i + j)
		}
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
		want = append(want, chunk...)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, n, err := s.ReadObject(ctx, "big")
	if err != nil || n != int64(len(want)) {
		t.Fatalf("ReadObject: %d bytes, %v; want %d", n, err, len(want))
	}
	defer r.Close()
	p := make([]byte, 3<<20)
	off := int64(partSize - 1<<20)
	if err := r.ReadAt(ctx, p, off); err != nil || !bytes.Equal(p, want[off:off+int64(len(p))]) {
		t.Fatalf("a read across the parts' boundary: %v", err)
	}
}

func openEngine(t *testing.T, dir string, st storage.ObjectStore, creator uint64, clk clock.Clock) *table.Engine {
	t.Helper()
	e, err := table.Open(table.Options{Dir: dir, Clock: clk, Logger: slog.New(slog.DiscardHandler),
		Shared: &storage.SharedOptions{Store: st, Locator: "s3://bkt/cluster/", CreatorID: creator}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func countRows(t *testing.T, e *table.Engine) (rows, cells int) {
	t.Helper()
	err := e.ReadRows(context.Background(), "i", "t", table.ReadRequest{}, func(r cell.Row) error {
		rows++
		cells += len(r.Cells)
		for _, c := range r.Cells {
			if want := fmt.Sprintf("%s/%s", r.Key, c.Qualifier); string(c.Value) != want {
				return fmt.Errorf("%s:%s = %q", r.Key, c.Qualifier, c.Value)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return rows, cells
}

// TestMoveOverS3: two engines on one bucket of an in-process S3 service;
// 100k cells compacted into the shared levels move by reference (no key
// travels), the target reads them all through the bucket, across a
// restart, after the source excised them.
// moveRows is how many rows of ten cells TestMoveOverS3 writes; half of
// them move. The default keeps the suite short; the figure in
// docs/scale-out.md is from -objstore.moverows=10000 (100,000 cells).
var moveRows = flag.Int("objstore.moverows", 1000, "TestMoveOverS3: rows of ten cells to write (half move)")

func TestMoveOverS3(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("writes many cells")
	}
	if *moveRows < 1000 || *moveRows%1000 != 0 {
		t.Fatalf("-objstore.moverows=%d: want a multiple of 1000", *moveRows)
	}
	half := *moveRows / 2
	ctx := context.Background()
	f := startFakeS3(t, "bkt")
	st := openFake(t, f, "s3://bkt/cluster")
	root := t.TempDir()
	clk := clock.NewFake(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	src := openEngine(t, filepath.Join(root, "a"), st, 1, clk)
	defer src.Close()
	dst := openEngine(t, filepath.Join(root, "b"), st, 2, clk)
	defer func() { dst.Close() }()
	spec := table.TableSpec{ID: 42, Families: []table.FamilySpec{{Name: "f"}}}
	for _, e := range []*table.Engine{src, dst} {
		if _, err := e.CreateTable("i", "t", spec); err != nil {
			t.Fatal(err)
		}
	}
	ts := clk.Now().UnixMilli() * 1000
	for b := 0; b < *moveRows/500; b++ {
		var batch []table.RowMutation
		for r := b * 500; r < (b+1)*500; r++ {
			row := fmt.Sprintf("r%05d", r)
			var muts []table.Mutation
			for q := 0; q < 10; q++ {
				muts = append(muts, table.Mutation{Kind: table.SetCell, Family: "f", Qualifier: []byte{byte('a' + q)}, Timestamp: ts,
					Value: []byte(fmt.Sprintf("%s/%c", row, 'a'+q))})
			}
			batch = append(batch, table.RowMutation{Row: []byte(row), Mutations: muts})
		}
		if _, err := src.MutateRows("i", "t", batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := src.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := src.Compact(ctx, []byte{0}, []byte{0xff}); err != nil {
		t.Fatal(err)
	}
	objects, err := st.List("", "")
	if err != nil || len(objects) == 0 {
		t.Fatalf("the bucket holds %v after a compaction (%v)", objects, err)
	}

	lo := []byte(fmt.Sprintf("r%05d", half))
	x, err := src.ExportSpan(ctx, "i", "t", lo, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	s := x.Stats()
	t.Logf("export: %+v; bucket before: %d objects", s, len(objects))
	if s.LocalKeys != 0 || s.SharedSSTs == 0 || s.Encoded > 4096 {
		t.Errorf("export %+v: want shared references only, a few KB", s)
	}
	enc, _ := x.Marshal()
	y, err := table.UnmarshalSpanExport(enc)
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.IngestSpan(ctx, y); err != nil {
		t.Fatal(err)
	}
	if err := src.ExciseSpan(ctx, "i", "t", lo, nil); err != nil {
		t.Fatal(err)
	}
	x.Release()
	if rows, cells := countRows(t, dst); rows != half || cells != 10*half {
		t.Fatalf("target reads %d rows, %d cells; want %d, %d", rows, cells, half, 10*half)
	}
	if rows, cells := countRows(t, src); rows != half || cells != 10*half {
		t.Fatalf("source keeps %d rows, %d cells; want %d, %d", rows, cells, half, 10*half)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	dst = openEngine(t, filepath.Join(root, "b"), st, 2, clk)
	if rows, cells := countRows(t, dst); rows != half || cells != 10*half {
		t.Fatalf("target after a restart reads %d rows, %d cells", rows, cells)
	}
	after, _ := st.List("", "")
	t.Logf("bucket after: %v", after)
}
