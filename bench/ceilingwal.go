package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
)

// TargetCeilingWAL is the ceiling with the least any durable server must
// do per acknowledged write: each MutateRows call's cells (row key,
// qualifier, timestamp, value, length-prefixed) are appended to one log
// file, and the call is acknowledged once an fdatasync covering them has
// returned. Concurrent calls share fsyncs (group commit: whichever call
// finds no sync running writes and syncs everything appended so far, the
// others wait for it). The file is zero-filled ahead of the writes
// (walPrealloc) and synced before the server listens, so the fdatasyncs
// under load need not commit a new file size either: the same as a Pebble
// WAL file reused. No index, no memtable, nothing to read back: writes
// only. Its throughput over raw Pebble's is the floor the ≥ 50% target
// meets: no durable server behind this client reaches more.
const TargetCeilingWAL = "ceiling-wal"

// walPrealloc is how much of the ceiling-wal log is zero-filled ahead: the
// default writes workload appends ~26 MB, 500,000 rows ~65 MB. (The
// package's tests lower it: they write a few KB.)
var walPrealloc = 128 << 20

// groupLog is an append-only log with group commit.
type groupLog struct {
	f *os.File
	// sync makes the file's written bytes durable: fdatasync (tests
	// replace it).
	sync func(*os.File) error

	mu      sync.Mutex
	cond    sync.Cond
	buf     []byte // appended, not yet handed to a sync
	spare   []byte // the buffer the running sync writes, reused
	off     int64  // where the next write goes
	appends uint64 // appends so far
	synced  uint64 // appends durable
	syncing bool
	err     error
	syncs   uint64 // fdatasyncs done (tests)
}

// openGroupLog creates the log file log in dir, zero-filled to prealloc
// bytes and synced (file and directory).
func openGroupLog(dir string, prealloc int) (*groupLog, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		return nil, err
	}
	zero := make([]byte, 1<<20)
	for n := 0; n < prealloc; n += len(zero) {
		if _, err := f.Write(zero[:min(len(zero), prealloc-n)]); err != nil {
			f.Close()
			return nil, err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	l := &groupLog{f: f, sync: fdatasync}
	l.cond.L = &l.mu
	return l, nil
}

// append adds what add appends to the log and returns once it is durable.
func (l *groupLog) append(add func([]byte) []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = add(l.buf)
	l.appends++
	mine := l.appends
	for l.synced < mine && l.err == nil {
		if l.syncing {
			l.cond.Wait()
			continue
		}
		// Lead: write and sync everything appended so far.
		l.syncing = true
		buf, upto, off := l.buf, l.appends, l.off
		l.buf = l.spare[:0]
		l.mu.Unlock()
		_, err := l.f.WriteAt(buf, off)
		if err == nil {
			err = l.sync(l.f)
		}
		l.mu.Lock()
		l.spare, l.syncing = buf, false
		l.off += int64(len(buf))
		l.syncs++
		if err != nil {
			l.err = fmt.Errorf("bench: ceiling-wal: %w", err)
		} else {
			l.synced = upto
		}
		l.cond.Broadcast()
	}
	return l.err
}

func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

func (l *groupLog) Close() error { return l.f.Close() }

// appendCells appends a MutateRows call's SetCells to dst: per cell the
// row key, qualifier and value, each uvarint-length-prefixed, and the
// timestamp.
func appendCells(dst []byte, req *btpb.MutateRowsRequest) []byte {
	for _, e := range req.GetEntries() {
		for _, m := range e.GetMutations() {
			sc := m.GetSetCell()
			if sc == nil {
				continue
			}
			dst = binary.AppendUvarint(dst, uint64(len(e.GetRowKey())))
			dst = append(dst, e.GetRowKey()...)
			dst = binary.AppendUvarint(dst, uint64(len(sc.GetColumnQualifier())))
			dst = append(dst, sc.GetColumnQualifier()...)
			dst = binary.AppendVarint(dst, sc.GetTimestampMicros())
			dst = binary.AppendUvarint(dst, uint64(len(sc.GetValue())))
			dst = append(dst, sc.GetValue()...)
		}
	}
	return dst
}

// StartCeilingWAL starts the ceiling appending its writes to a group-
// committed log in dir (TargetCeilingWAL) in this process on 127.0.0.1.
func StartCeilingWAL(ctx context.Context, dir string) (*Endpoint, error) {
	l, err := openGroupLog(dir, walPrealloc)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("bench: ceiling: %w", err)
	}
	srv := newCeilingWith(nil, l)
	go srv.Serve(lis)
	e, err := Dial(ctx, TargetCeilingWAL, lis.Addr().String())
	if err != nil {
		srv.Stop()
		l.Close()
		return nil, err
	}
	e.stop = func() error { srv.Stop(); return l.Close() }
	return e, nil
}
