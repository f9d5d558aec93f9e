package table

import (
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// SSTWriter writes one SSTable file the engine can ingest or read back
// (OpenSSTs): its comparer, block-property collectors and newest format.
// Keys must be added in order.
type SSTWriter struct{ w *sstable.Writer }

// CreateSST creates the file at path and a writer for it.
func (e *Engine) CreateSST(path string) (*SSTWriter, error) {
	f, err := vfs.Default.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, err
	}
	return &SSTWriter{w: sstable.NewWriter(objstorageprovider.NewFileWritable(f), e.store.SSTWriterOptions())}, nil
}

// Set adds one key.
func (s *SSTWriter) Set(k, v []byte) error { return s.w.Set(k, v) }

// EstimatedSize is the file's size so far.
func (s *SSTWriter) EstimatedSize() uint64 { return s.w.Raw().EstimatedSize() }

// Close finishes (and syncs) the file.
func (s *SSTWriter) Close() error { return s.w.Close() }

// OpenSSTs iterates over SSTable files written by CreateSST (not ingested),
// given in key order and not overlapping. The iterator closes the files.
func (e *Engine) OpenSSTs(paths []string) (*RawIter, error) {
	var files []sstable.ReadableFile
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	for _, p := range paths {
		f, err := vfs.Default.Open(p)
		if err != nil {
			closeAll()
			return nil, err
		}
		files = append(files, f)
	}
	it, err := e.store.NewSSTIter(files, nil)
	if err != nil {
		closeAll()
		return nil, err
	}
	return &RawIter{it: it}, nil
}
