package storage

import (
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A WAL that grows on each write makes each of its syncs commit the file's
// new size too (on ext4 a journal commit beside the data), and Pebble's
// preallocation (fallocate with KEEP_SIZE) does not help: the size still
// changes, and the preallocated extents must be marked written. Obsolete
// WALs are deleted, not recycled (cleaner.go), so every WAL is a new file.
// zeroAheadFS writes zeros ahead of Pebble's writes to a new WAL, so most
// writes land inside the file's size, over blocks already written, and
// their sync has only the data to make durable; the file's size changes
// once per walZeroAhead/2 or more bytes of log instead of on every write.
//
// What a crash leaves is unchanged but for a tail of zeros (at most
// walZeroAhead bytes) after the log's last write, and Pebble's replay
// takes that for the log's end (docs/storage-format.md, "WAL files"):
// the record reader meets a zeroed chunk header, reads ahead, finds no
// later chunk, and reports an unclean end, which Open accepts for the
// newest WAL. An older WAL always ends in its EOF trailer, which Pebble
// writes and syncs before it creates the next WAL, and the reader stops
// at the trailer, before the zeros.
type zeroAheadFS struct{ vfs.FS }

// walZeroAhead is how far past the log's end the file is kept zeroed.
const walZeroAhead = 1 << 20

// walWrites is the write category Pebble gives its WAL files.
const walWrites vfs.DiskWriteCategory = "pebble-wal"

var walZeros [walZeroAhead]byte

func (fs zeroAheadFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, cat)
	if err != nil || cat != walWrites || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &zeroAheadFile{File: f}, nil
}

// zeroAheadFile is a new WAL file. Pebble writes a WAL in order with Write,
// from one goroutine at a time, so the file needs no lock.
type zeroAheadFile struct {
	vfs.File
	off    int64 // where the next Write lands
	zeroed int64 // the file's size: zeros (or the log) up to here
}

// Write writes p at the log's end, first zeroing walZeroAhead bytes past
// it when the zeroed tail has fallen under half of that. A failed zeroing
// fails the write (Pebble treats a WAL write error as fatal).
func (f *zeroAheadFile) Write(p []byte) (int, error) {
	end := f.off + int64(len(p))
	if end+walZeroAhead/2 > f.zeroed {
		from := max(f.zeroed, end)
		to := end + walZeroAhead
		if _, err := f.File.WriteAt(walZeros[:to-from], from); err != nil {
			return 0, err
		}
		f.zeroed = to
	}
	n, err := f.File.Write(p)
	f.off += int64(n)
	return n, err
}
