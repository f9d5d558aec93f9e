package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// TargetCeilingWAL is the ceiling with the least any durable server must
// do per acknowledged write: it takes each MutateRows or MutateRow call's
// bytes as they came off the wire, undecoded (floorCodec: only the
// MutateRows entries are counted, by their tags, to answer each; a
// MutateRow's top-level fields are only walked, to refuse malformed
// bytes), appends them to one log file as a record (appendRecord), and
// acknowledges the call once an fdatasync covering them has returned,
// with a response encoded by hand. Concurrent calls share
// fsyncs (group commit: whichever call finds no sync running writes and
// syncs everything appended so far, the others wait for it). The file is
// zero-filled ahead of the writes (walPrealloc) and synced before the
// server listens, so the fdatasyncs under load need not commit a new file
// size either: the same as ebbtable's WAL (storage/walzero.go). No
// decoding, no index, no memtable, nothing to read back: writes only. Its
// throughput over raw Pebble's is the floor the >= 50% target meets: a
// durable server behind this client must receive the call, make its bytes
// durable and answer it, and this one does nothing else.
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

// Kinds of ceiling-wal record: which request's bytes it holds. The log's
// zeros written ahead read as no record.
const (
	recMutateRows = 1 // a MutateRowsRequest
	recMutateRow  = 2 // a MutateRowRequest
)

// appendRecord appends one call's request bytes to dst as a record: its
// kind, then the bytes uvarint-length-prefixed.
func appendRecord(dst []byte, kind byte, req []byte) []byte {
	return append(binary.AppendUvarint(append(dst, kind), uint64(len(req))), req...)
}

// rawMsg is a message's bytes, neither decoded nor encoded (floorCodec).
type rawMsg struct{ b []byte }

// floorCodec is gRPC's protobuf codec but for *rawMsg, whose bytes it
// passes through as they are: the ceiling-wal server's MutateRows takes
// its request and sends its response that way.
type floorCodec struct{ encoding.CodecV2 }

func (c floorCodec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*rawMsg); ok {
		return mem.BufferSlice{mem.SliceBuffer(m.b)}, nil
	}
	return c.CodecV2.Marshal(v)
}

func (c floorCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(*rawMsg); ok {
		m.b = data.Materialize()
		return nil
	}
	return c.CodecV2.Unmarshal(data, v)
}

// floorService is the Bigtable data service with MutateRows and MutateRow
// served from the request's bytes (floorMutateRows, floorMutateRow); every
// other method as generated. The ceiling-wal and ceiling-pebble servers
// use it.
func floorService() *grpc.ServiceDesc {
	desc := btpb.Bigtable_ServiceDesc
	desc.Streams = slices.Clone(desc.Streams)
	for i := range desc.Streams {
		if desc.Streams[i].StreamName == "MutateRows" {
			desc.Streams[i].Handler = func(srv any, stream grpc.ServerStream) error {
				return srv.(*ceilingServer).floorMutateRows(stream)
			}
		}
	}
	desc.Methods = slices.Clone(desc.Methods)
	for i := range desc.Methods {
		if desc.Methods[i].MethodName == "MutateRow" {
			// The ceilings' servers have no interceptors.
			desc.Methods[i].Handler = func(srv any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				return srv.(*ceilingServer).floorMutateRow(dec)
			}
		}
	}
	return &desc
}

// floorMutateRows makes the request durable, from its bytes, and then
// answers every entry OK: ceiling-wal appends the bytes to its log;
// ceiling-pebble commits the request's cells to Pebble in one synced
// batch (writePebbleWire).
func (s *ceilingServer) floorMutateRows(stream grpc.ServerStream) error {
	var req rawMsg
	if err := stream.RecvMsg(&req); err != nil {
		return err
	}
	var n int
	var err error
	if s.db != nil {
		err = s.writePebbleWire(func(f setCellFunc) (err error) {
			n, err = forEachSetCell(req.b, f)
			return err
		})
	} else if n, err = countEntries(req.b); err == nil {
		err = s.wal.append(func(b []byte) []byte { return appendRecord(b, recMutateRows, req.b) })
	}
	if err != nil {
		return status.Errorf(codes.Internal, "ceiling: %v", err)
	}
	return stream.SendMsg(&rawMsg{b: okEntries(n)})
}

// floorMutateRow is floorMutateRows for one row (a MutateRowRequest's
// bytes: row_key = 2, mutations = 3): ceiling-pebble commits its cells in
// one synced batch, ceiling-wal appends the bytes to its log; the answer
// is an empty MutateRowResponse.
func (s *ceilingServer) floorMutateRow(dec func(any) error) (any, error) {
	var req rawMsg
	if err := dec(&req); err != nil {
		return nil, err
	}
	var err error
	if s.db != nil {
		err = s.writePebbleWire(func(f setCellFunc) error { return rowSetCells(req.b, 2, 3, f) })
	} else if err = eachField(req.b, func(protowire.Number, protowire.Type, []byte) error { return nil }); err == nil {
		err = s.wal.append(func(b []byte) []byte { return appendRecord(b, recMutateRow, req.b) })
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "ceiling: %v", err)
	}
	return &rawMsg{}, nil
}

// countEntries counts a MutateRowsRequest's entries (field 2) from its
// bytes, without decoding them.
func countEntries(b []byte) (int, error) {
	n := 0
	err := eachField(b, func(num protowire.Number, typ protowire.Type, _ []byte) error {
		if num == 2 && typ == protowire.BytesType {
			n++
		}
		return nil
	})
	return n, err
}

// okEntries encodes a MutateRowsResponse with entries 0..n-1, each with an
// OK status (an empty google.rpc.Status).
func okEntries(n int) []byte {
	var b, e []byte
	for i := range n {
		e = protowire.AppendTag(e[:0], 1, protowire.VarintType)
		e = protowire.AppendVarint(e, uint64(i))
		e = protowire.AppendTag(e, 2, protowire.BytesType)
		e = protowire.AppendVarint(e, 0)
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, e)
	}
	return b
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

// setCellFunc takes one SetCell read from a request's bytes; the slices
// alias the request.
type setCellFunc func(row, qual []byte, ts int64, value []byte) error

// forEachSetCell calls f with each SetCell of a MutateRowsRequest's bytes
// (MutateRowsRequest.entries = 2; Entry.row_key = 1, mutations = 2),
// reading the bytes without decoding them into messages (rowSetCells),
// and returns the number of entries.
func forEachSetCell(req []byte, f setCellFunc) (int, error) {
	n := 0
	err := eachField(req, func(num protowire.Number, typ protowire.Type, entry []byte) error {
		if num != 2 || typ != protowire.BytesType {
			return nil
		}
		n++
		return rowSetCells(entry, 1, 2, f)
	})
	return n, err
}

// rowSetCells calls f with each SetCell of one row's message bytes: a
// MutateRowsRequest.Entry (row key field 1, mutations 2) or a
// MutateRowRequest (2, 3). (Mutation.set_cell = 1; SetCell.column_qualifier
// = 2, timestamp_micros = 3, value = 4.) Other mutations are skipped (the
// workloads write SetCells only).
func rowSetCells(msg []byte, rowField, mutField protowire.Number, f setCellFunc) error {
	var row []byte
	if err := eachField(msg, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num == rowField && typ == protowire.BytesType {
			row = v
		}
		return nil
	}); err != nil {
		return err
	}
	return eachField(msg, func(num protowire.Number, typ protowire.Type, mut []byte) error {
		if num != mutField || typ != protowire.BytesType {
			return nil
		}
		return eachField(mut, func(num protowire.Number, typ protowire.Type, sc []byte) error {
			if num != 1 || typ != protowire.BytesType {
				return nil
			}
			var qual, value []byte
			var ts int64
			if err := eachField(sc, func(num protowire.Number, typ protowire.Type, v []byte) error {
				switch {
				case num == 2 && typ == protowire.BytesType:
					qual = v
				case num == 4 && typ == protowire.BytesType:
					value = v
				case num == 3 && typ == protowire.VarintType:
					x, k := protowire.ConsumeVarint(v)
					if k < 0 {
						return protowire.ParseError(k)
					}
					ts = int64(x)
				}
				return nil
			}); err != nil {
				return err
			}
			return f(row, qual, ts, value)
		})
	})
}

// eachField calls f with each field of a message's bytes: its number, its
// wire type, and its value (a length-delimited field's contents; else the
// field's encoded value).
func eachField(b []byte, f func(protowire.Number, protowire.Type, []byte) error) error {
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return protowire.ParseError(k)
		}
		b = b[k:]
		k = protowire.ConsumeFieldValue(num, typ, b)
		if k < 0 {
			return protowire.ParseError(k)
		}
		v := b[:k]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(v)
		}
		if err := f(num, typ, v); err != nil {
			return err
		}
		b = b[k:]
	}
	return nil
}
