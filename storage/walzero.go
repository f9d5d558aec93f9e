package storage

import (
	"strings"
	"sync"

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
// about ten times in a WAL's first megabyte and once per 0.5–1 MiB of log
// after that, instead of on every write.
//
// What a crash leaves is unchanged but for a tail of zeros (at most
// walZeroAhead bytes) after the log's last write, and Pebble's replay
// takes that for the log's end (docs/storage-format.md, "WAL files end in
// zeros"; replayWAL in Pebble's open.go, Reader.nextChunk and
// readAheadForCorruption in its record package):
// the record reader meets a zeroed chunk header, reads ahead, finds no
// later chunk, and reports an unclean end, which Open accepts for the
// newest WAL. An older WAL always ends in its EOF trailer, which Pebble
// writes and syncs before it creates the next WAL, and the reader stops
// at the trailer, before the zeros.
type zeroAheadFS struct{ vfs.FS }

// How far past the log's end the file is kept zeroed: as far as the log
// is long, but at least minZeroAhead and at most walZeroAhead. A database
// that writes little (tests open many) pays for 64 KiB of zeros a
// WAL, not a megabyte; a busy WAL changes its size once per 0.5–1 MiB.
const (
	minZeroAhead = 64 << 10
	walZeroAhead = 1 << 20
)

// walWrites is the write category Pebble gives its WAL files.
const walWrites vfs.DiskWriteCategory = "pebble-wal"

// zeroBufs holds buffers for the zeros. Each is cleared before every use:
// a file may change what it is given to write (Pebble's memory FS does,
// on purpose, when built with the race detector), so no buffer can be
// trusted to still be zeros.
var zeroBufs = sync.Pool{New: func() any { return new([walZeroAhead]byte) }}

func (fs zeroAheadFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, cat)
	if err != nil || cat != walWrites || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &zeroAheadFile{File: f}, nil
}

// zeroAheadFile is a new WAL file. Pebble writes a WAL in order with Write,
// from one goroutine at a time, so the file needs no lock. Only the file's
// growth goes through the file's own Write (an append: the file's position
// is always its size, zeroed), and the log's writes over the zeros through
// WriteAt: Pebble's memory FS extends a file by WriteAt one byte at a
// time, too slowly for a megabyte a WAL in tests.
type zeroAheadFile struct {
	vfs.File
	off    int64 // where the log's next Write lands
	zeroed int64 // the file's size: the log, then zeros, up to here
}

// Write writes p at the log's end: over the zeros as far as they go, by
// growing the file beyond them, and then, when less than half of the
// distance to keep zeroed (zeroAhead) is left past the log, appends zeros
// to that distance past it. A failed write of zeros fails the write
// (Pebble treats a WAL write error as fatal, so the log's records are
// never acknowledged).
func (f *zeroAheadFile) Write(p []byte) (int, error) {
	n := 0
	if over := min(int64(len(p)), f.zeroed-f.off); over > 0 {
		m, err := f.File.WriteAt(p[:over], f.off)
		n += m
		f.off += int64(m)
		if err != nil {
			return n, err
		}
	}
	if n < len(p) { // here f.off == f.zeroed, the file's position
		m, err := f.File.Write(p[n:])
		n += m
		f.off += int64(m)
		f.zeroed = f.off
		if err != nil {
			return n, err
		}
	}
	if ahead := zeroAhead(f.off); f.off+ahead/2 > f.zeroed {
		buf := zeroBufs.Get().(*[walZeroAhead]byte)
		zeros := buf[:f.off+ahead-f.zeroed]
		clear(zeros)
		m, err := f.File.Write(zeros)
		zeroBufs.Put(buf)
		f.zeroed += int64(m)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// zeroAhead is how far past a log of size n its file is kept zeroed.
func zeroAhead(n int64) int64 { return min(max(n, minZeroAhead), walZeroAhead) }
