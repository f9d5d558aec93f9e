package storage

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// The way back from a full disk. A database whose disk filled cannot start:
// replaying its WAL needs room for a flush. So, as CockroachDB does, the
// data directory keeps a ballast file — space reserved while there is
// plenty — that the operator deletes to get room to start and take stock.
// Start-up refuses, with a message naming the file, while the free space is
// below half the ballast; the server recreates the ballast once there is
// room for it again.

// BallastName is the ballast file's name in the data directory.
const BallastName = "EMERGENCY_BALLAST"

// ErrDiskFull marks a start-up refused for lack of disk space.
var ErrDiskFull = errors.New("disk full")

// MaxPercentBallast caps a ballast sized as a percentage of the disk.
const MaxPercentBallast = 1 << 30

// Ballast sizes the emergency ballast: Bytes when set, else Percent of the
// filesystem's size, at most MaxPercentBallast. The zero value is none.
type Ballast struct {
	Bytes   int64
	Percent float64
}

// size is the ballast's size on a filesystem of total bytes.
func (b Ballast) size(total uint64) int64 {
	if b.Bytes > 0 {
		return b.Bytes
	}
	if b.Percent <= 0 {
		return 0
	}
	return min(int64(float64(total)*b.Percent/100), MaxPercentBallast)
}

// checkSpace refuses to start when the filesystem holding dir has less than
// half the ballast free, and otherwise (re)creates the ballast when there is
// room for it and still half of it free afterwards. Filesystems that cannot
// tell their usage (in-memory ones) are not checked.
func checkSpace(fs vfs.FS, dir string, ballast Ballast, log *slog.Logger) error {
	if ballast == (Ballast{}) {
		return nil
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	usage, err := fs.GetDiskUsage(dir)
	if err != nil {
		return nil // unsupported (MemFS) or unknowable: nothing to check
	}
	size := ballast.size(usage.TotalBytes)
	if size == 0 {
		return nil
	}
	path := filepath.Join(dir, BallastName)
	have := int64(0)
	if st, err := fs.Stat(path); err == nil {
		have = st.Size()
	}
	avail := int64(usage.AvailBytes)
	if avail < size/2 {
		if have > 0 {
			return fmt.Errorf("%w: %s free on the filesystem holding %s, and ebbtable needs at least %s to start. "+
				"Delete the ballast file %s (%s, kept for this moment) to get room to start, then free space or grow the disk; "+
				"ebbtable recreates the ballast once there is room", ErrDiskFull, bytesString(avail), dir, bytesString(size/2), path, bytesString(have))
		}
		return fmt.Errorf("%w: %s free on the filesystem holding %s, and ebbtable needs at least %s to start "+
			"(there is no ballast file %s left to delete): free space or grow the disk", ErrDiskFull, bytesString(avail), dir, bytesString(size/2), path)
	}
	if have >= size {
		return nil
	}
	if avail-(size-have) < size/2 {
		log.Warn("disk space low: the emergency ballast is not recreated until there is room", "free", bytesString(avail), "ballast", path, "size", bytesString(size))
		return nil
	}
	if err := writeBallast(fs, path, size); err != nil {
		log.Warn("could not create the emergency ballast", "file", path, "err", err)
		fs.Remove(path)
	}
	return nil
}

// writeBallast creates path holding size bytes of reserved disk blocks.
func writeBallast(fs vfs.FS, path string, size int64) error {
	tmp := path + ".tmp"
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	if err := allocate(f, size); err != nil {
		f.Close()
		fs.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		fs.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		fs.Remove(tmp)
		return err
	}
	return fs.Rename(tmp, path)
}

// allocate gives f size bytes of disk: fallocate where the file is an OS
// file (the blocks are reserved without writing them), zeros otherwise.
func allocate(f vfs.File, size int64) error {
	if fd := f.Fd(); fd != vfs.InvalidFd {
		if err := unix.Fallocate(int(fd), 0, 0, size); err == nil {
			return nil
		}
	}
	zeros := make([]byte, 1<<20)
	for left := size; left > 0; {
		n := min(left, int64(len(zeros)))
		if _, err := f.Write(zeros[:n]); err != nil {
			return err
		}
		left -= n
	}
	return nil
}

// bytesString prints a byte count for people.
func bytesString(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
