package backup

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/ebbtable/ebbtable/progress"
	"github.com/ebbtable/ebbtable/storage"
)

// backupTableID is the table id of the cell keys inside backup SSTables: no
// real table has it (ids start at 1), and restore moves the keys to the new
// table's id.
const backupTableID = 0

// checkEvery is how many cells are copied between two looks at the context.
const checkEvery = 1024

// sstWriter writes a sorted stream of cells into numbered SSTables in dir,
// starting a new file past a target size at a row boundary.
type sstWriter struct {
	dir    string
	opts   sstable.WriterOptions
	target int64

	w       *sstable.Writer
	cur     FileInfo
	lastRow []byte
	files   []FileInfo
	keyBuf  []byte
}

func newSSTWriter(dir string, opts sstable.WriterOptions, target int64) *sstWriter {
	return &sstWriter{dir: dir, opts: opts, target: target}
}

// add writes one cell whose key is already in its final form.
func (s *sstWriter) add(k, v []byte) error {
	row := k[:storage.RowKeyLen(k)]
	if s.w != nil && int64(s.w.Raw().EstimatedSize()) >= s.target && !bytes.Equal(row, s.lastRow) {
		if err := s.finishFile(); err != nil {
			return err
		}
	}
	if s.w == nil {
		name := fmt.Sprintf("%06d.sst", len(s.files)+1)
		f, err := vfs.Default.Create(filepath.Join(s.dir, name), vfs.WriteCategoryUnspecified)
		if err != nil {
			return err
		}
		s.w = sstable.NewWriter(objstorageprovider.NewFileWritable(f), s.opts)
		s.cur = FileInfo{Name: name}
	}
	s.lastRow = append(s.lastRow[:0], row...)
	s.cur.Cells++
	return s.w.Set(k, v)
}

// finishFile closes (and syncs) the current file.
func (s *sstWriter) finishFile() error {
	if s.w == nil {
		return nil
	}
	err := s.w.Close()
	s.w = nil
	if err != nil {
		return err
	}
	st, err := os.Stat(filepath.Join(s.dir, s.cur.Name))
	if err != nil {
		return err
	}
	s.cur.Bytes = st.Size()
	s.files = append(s.files, s.cur)
	return nil
}

// finish closes the last file and returns them all.
func (s *sstWriter) finish() ([]FileInfo, error) {
	if err := s.finishFile(); err != nil {
		return nil, err
	}
	return s.files, nil
}

// abort closes an unfinished file; the caller removes the directory.
func (s *sstWriter) abort() {
	if s.w != nil {
		s.w.Close()
		s.w = nil
	}
}

// copyCells copies every cell it yields (keys of any table id) into w,
// moved to table id `to`, skipping cells keep refuses. It checks ctx every
// checkEvery cells.
func copyCells(ctx context.Context, it *pebble.Iterator, w *sstWriter, to uint64, keep func(k []byte) (bool, error)) (int64, error) {
	var n, reported int64
	var buf []byte
	op := progress.FromContext(ctx) // counts the cells copied
	defer func() { op.Add(n - reported) }()
	for it.First(); it.Valid(); it.Next() {
		if n%checkEvery == 0 {
			if err := ctx.Err(); err != nil {
				return n, err
			}
			op.Add(n - reported)
			reported = n
		}
		k := it.Key()
		if keep != nil {
			ok, err := keep(k)
			if err != nil {
				return n, err
			}
			if !ok {
				continue
			}
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return n, err
		}
		if buf, err = storage.WithTableID(buf[:0], k, to); err != nil {
			return n, err
		}
		if err := w.add(buf, v); err != nil {
			return n, err
		}
		n++
	}
	return n, it.Error()
}

// openSSTs opens a backup's files for reading, in key order, checking
// their sizes against the manifest. The iterator built on them owns them.
func openSSTs(dir string, files []FileInfo) ([]sstable.ReadableFile, error) {
	var out []sstable.ReadableFile
	closeAll := func() {
		for _, f := range out {
			f.Close()
		}
	}
	for _, fi := range files {
		f, err := vfs.Default.Open(filepath.Join(dir, fi.Name))
		if err != nil {
			closeAll()
			return nil, err
		}
		st, err := f.Stat()
		if err == nil && st.Size() != fi.Bytes {
			err = fmt.Errorf("ebbtable: backup file %s is %d bytes, the manifest says %d", fi.Name, st.Size(), fi.Bytes)
		}
		if err != nil {
			f.Close()
			closeAll()
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}
