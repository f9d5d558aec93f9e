package backup

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ebbtable/ebbtable/progress"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
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
	eng    SSTs
	target int64
	prefix string // of the file names

	w       *table.SSTWriter
	cur     FileInfo
	lastRow []byte
	files   []FileInfo
	keyBuf  []byte
}

func newSSTWriter(dir string, eng SSTs, target int64) *sstWriter {
	return &sstWriter{dir: dir, eng: eng, target: target}
}

// add writes one cell whose key is already in its final form.
func (s *sstWriter) add(k, v []byte) error {
	row := k[:storage.RowKeyLen(k)]
	if s.w != nil && int64(s.w.EstimatedSize()) >= s.target && !bytes.Equal(row, s.lastRow) {
		if err := s.finishFile(); err != nil {
			return err
		}
	}
	if s.w == nil {
		name := fmt.Sprintf("%s%06d.sst", s.prefix, len(s.files)+1)
		w, err := s.eng.CreateSST(filepath.Join(s.dir, name))
		if err != nil {
			return err
		}
		s.w = w
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
func copyCells(ctx context.Context, it *table.RawIter, w *sstWriter, to uint64, keep func(k []byte) (bool, error)) (int64, error) {
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
		v, err := it.Value()
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
// each file's size against the manifest.
func openSSTs(eng SSTs, dir string, files []FileInfo) (*table.RawIter, error) {
	paths := make([]string, 0, len(files))
	for _, fi := range files {
		p := filepath.Join(dir, fi.Name)
		st, err := os.Stat(p)
		if err == nil && st.Size() != fi.Bytes {
			err = fmt.Errorf("ebbtable: backup file %s is %d bytes, the manifest says %d", fi.Name, st.Size(), fi.Bytes)
		}
		if err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return eng.OpenSSTs(paths)
}
