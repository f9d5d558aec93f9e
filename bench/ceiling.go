package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/storage"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TargetCeiling is a server that does as little as a Bigtable server can:
// it keeps the last value written to each row in a Go map and answers from
// it (no storage, no versions, no filters, no schema). A server can hardly
// do less per write or point read, so its ratio to the emulator bounds any
// server's there: what is left is the cost of the client, gRPC and
// protobuf, paid on the same cores. (Its scans are not tuned: no bound.)
const TargetCeiling = "ceiling"

// TargetCeilingPebble is the ceiling with raw Pebble behind it: each
// MutateRows or MutateRow call's SetCells, read from the request's bytes
// without decoding it into messages (floorCodec), go into one Pebble batch
// (the cells encoded as ebbtable encodes them, in a database storage.Open
// opened with ebbtable's options) committed with pebble.Sync before the
// call is acknowledged. It does what any durable Pebble-backed server must
// do per write and nothing else, so its write throughput bounds any such
// server's behind this client on this machine. Writes only: it keeps no
// map to read from.
const TargetCeilingPebble = "ceiling-pebble"

// ceilingServer holds one table's rows: row key → the single cell the
// workloads write (family, qualifier, value).
type ceilingServer struct {
	btpb.UnimplementedBigtableServer
	adminpb.UnimplementedBigtableTableAdminServer

	// db, if set, takes the writes instead of rows (TargetCeilingPebble);
	// so does wal (TargetCeilingWAL).
	db  *storage.DB
	wal *groupLog

	mu     sync.RWMutex
	tables map[string]bool
	rows   map[string]ceilingCell
	sorted []string // row keys in order, rebuilt by the first scan after writes
}

type ceilingCell struct {
	family    string
	qualifier []byte
	ts        int64
	value     []byte
}

// newCeiling is the ceiling's gRPC server, with the message limits
// ebbtable's server uses.
func newCeiling(db *storage.DB) *grpc.Server { return newCeilingWith(db, nil) }

// newCeilingWith is newCeiling writing to wal if it is not nil.
func newCeilingWith(db *storage.DB, wal *groupLog) *grpc.Server {
	cs := &ceilingServer{db: db, wal: wal, tables: map[string]bool{}, rows: map[string]ceilingCell{}}
	// Streams on long-lived workers, as ebbtable's serve runs them
	// (server.streamWorkers): a goroutine per call grew its stack on every
	// call, a ninth to an eighth of the durable floors' server CPU per
	// single-row write and a sixth of the plain ceiling's (docs/
	// performance.md, "Single-row writes: floors"), and 5.6 µs of the plain
	// ceiling's point read. A bound must not pay what ebbtable does not.
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(256 << 20), grpc.MaxSendMsgSize(256 << 20),
		grpc.NumStreamWorkers(uint32(max(128, 16*runtime.GOMAXPROCS(0))))}
	floor := wal != nil || db != nil
	if floor {
		opts = append(opts, grpc.ForceServerCodecV2(floorCodec{encoding.GetCodecV2(grpcproto.Name)}))
	}
	srv := grpc.NewServer(opts...)
	if floor {
		srv.RegisterService(floorService(), cs)
	} else {
		btpb.RegisterBigtableServer(srv, cs)
	}
	adminpb.RegisterBigtableTableAdminServer(srv, cs)
	return srv
}

// StartCeiling starts the ceiling server in this process on 127.0.0.1 and
// connects clients to it.
func StartCeiling(ctx context.Context) (*Endpoint, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: ceiling: %w", err)
	}
	srv := newCeiling(nil)
	go srv.Serve(lis)
	e, err := Dial(ctx, TargetCeiling, lis.Addr().String())
	if err != nil {
		srv.Stop()
		return nil, err
	}
	e.stop = func() error { srv.Stop(); return nil }
	return e, nil
}

// StartCeilingPebble starts the ceiling writing to raw Pebble in dir
// (TargetCeilingPebble) in this process on 127.0.0.1.
func StartCeilingPebble(ctx context.Context, dir string) (*Endpoint, error) {
	db, err := storage.Open(storage.Options{Dir: dir, FullMemtable: true})
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("bench: ceiling: %w", err)
	}
	srv := newCeiling(db)
	go srv.Serve(lis)
	e, err := Dial(ctx, TargetCeilingPebble, lis.Addr().String())
	if err != nil {
		srv.Stop()
		db.Close()
		return nil, err
	}
	e.stop = func() error { srv.Stop(); return db.Close() }
	return e, nil
}

// ServeCeiling serves the ceiling on addr until ctx ends: the process
// mode's ceiling target (ebbbench --serve-ceiling). Once it listens it
// prints "ceiling running on HOST:PORT" to stdout.
func ServeCeiling(ctx context.Context, addr string, stdout io.Writer) error {
	return ServeCeilingPebble(ctx, addr, "", stdout)
}

// ServeCeilingPebble is ServeCeiling with the writes going to raw Pebble
// in pebbleDir (TargetCeilingPebble; ebbbench --serve-ceiling
// --ceiling-pebble DIR); an empty pebbleDir serves the plain ceiling.
func ServeCeilingPebble(ctx context.Context, addr, pebbleDir string, stdout io.Writer) error {
	var db *storage.DB
	if pebbleDir != "" {
		var err error
		if db, err = storage.Open(storage.Options{Dir: pebbleDir, FullMemtable: true}); err != nil {
			return err
		}
		defer db.Close()
	}
	return serveCeiling(ctx, addr, db, nil, stdout)
}

// ServeCeilingWAL is ServeCeiling with the writes going to a group-
// committed log in walDir (TargetCeilingWAL; ebbbench --serve-ceiling
// --ceiling-wal DIR).
func ServeCeilingWAL(ctx context.Context, addr, walDir string, stdout io.Writer) error {
	l, err := openGroupLog(walDir, walPrealloc)
	if err != nil {
		return err
	}
	defer l.Close()
	return serveCeiling(ctx, addr, nil, l, stdout)
}

func serveCeiling(ctx context.Context, addr string, db *storage.DB, wal *groupLog, stdout io.Writer) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("bench: ceiling: %w", err)
	}
	srv := newCeilingWith(db, wal)
	go func() {
		<-ctx.Done()
		srv.Stop()
	}()
	fmt.Fprintf(stdout, "ceiling running on %s\n", lis.Addr())
	return srv.Serve(lis)
}

func (s *ceilingServer) CreateTable(_ context.Context, req *adminpb.CreateTableRequest) (*adminpb.Table, error) {
	name := req.GetParent() + "/tables/" + req.GetTableId()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tables[name] = true
	return &adminpb.Table{Name: name}, nil
}

func (s *ceilingServer) DeleteTable(_ context.Context, req *adminpb.DeleteTableRequest) (*emptypb.Empty, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.tables[req.GetName()] {
		return nil, status.Errorf(codes.NotFound, "ceiling: no table %s", req.GetName())
	}
	// One table's rows are all there is.
	delete(s.tables, req.GetName())
	s.rows, s.sorted = map[string]ceilingCell{}, nil
	return &emptypb.Empty{}, nil
}

func (s *ceilingServer) ListTables(_ context.Context, req *adminpb.ListTablesRequest) (*adminpb.ListTablesResponse, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	resp := &adminpb.ListTablesResponse{}
	for name := range s.tables {
		if strings.HasPrefix(name, req.GetParent()+"/tables/") {
			resp.Tables = append(resp.Tables, &adminpb.Table{Name: name})
		}
	}
	return resp, nil
}

func (s *ceilingServer) MutateRows(req *btpb.MutateRowsRequest, stream btpb.Bigtable_MutateRowsServer) error {
	resp := &btpb.MutateRowsResponse{Entries: make([]*btpb.MutateRowsResponse_Entry, len(req.GetEntries()))}
	s.mu.Lock()
	for i, e := range req.GetEntries() {
		s.setLocked(e.GetRowKey(), e.GetMutations())
		resp.Entries[i] = &btpb.MutateRowsResponse_Entry{Index: int64(i), Status: &rpcstatus.Status{}}
	}
	s.sorted = nil
	s.mu.Unlock()
	return stream.Send(resp)
}

// MutateRow is MutateRows for one row: its SetCells go to the map.
func (s *ceilingServer) MutateRow(_ context.Context, req *btpb.MutateRowRequest) (*btpb.MutateRowResponse, error) {
	s.mu.Lock()
	s.setLocked(req.GetRowKey(), req.GetMutations())
	s.sorted = nil
	s.mu.Unlock()
	return &btpb.MutateRowResponse{}, nil
}

// setLocked keeps row's last SetCell of muts (other mutations are
// ignored). s.mu is held.
func (s *ceilingServer) setLocked(row []byte, muts []*btpb.Mutation) {
	for _, m := range muts {
		if sc := m.GetSetCell(); sc != nil {
			s.rows[string(row)] = ceilingCell{sc.GetFamilyName(), sc.GetColumnQualifier(), sc.GetTimestampMicros(), sc.GetValue()}
		}
	}
}

// writePebbleWire commits the SetCells cells yields to s.db in one synced
// batch, each cell under the key ebbtable would give it (table and family
// ids fixed: the workloads write one table of one family). cells reads
// them from a request's bytes without decoding it into messages
// (forEachSetCell, rowSetCells); if it fails, nothing is committed.
func (s *ceilingServer) writePebbleWire(cells func(setCellFunc) error) error {
	const tableID, familyID = 1, 1
	b := s.db.NewBatch()
	defer b.Close()
	var key, val []byte
	if err := cells(func(row, qual []byte, ts int64, value []byte) error {
		key = storage.AppendCellKey(key[:0], tableID, row, familyID, qual, ts)
		val = append(append(val[:0], 0), value...) // storage.EncodeValue(value, 0)
		return b.Set(key, val, nil)
	}); err != nil {
		return err
	}
	return storage.CommitSynced(b)
}

func (s *ceilingServer) ReadRows(req *btpb.ReadRowsRequest, stream btpb.Bigtable_ReadRowsServer) error {
	set := req.GetRows()
	chunk := func(key string, c ceilingCell) *btpb.ReadRowsResponse_CellChunk {
		return &btpb.ReadRowsResponse_CellChunk{
			RowKey:          []byte(key),
			FamilyName:      wrapperspb.String(c.family),
			Qualifier:       wrapperspb.Bytes(c.qualifier),
			TimestampMicros: c.ts,
			Value:           c.value,
			RowStatus:       &btpb.ReadRowsResponse_CellChunk_CommitRow{CommitRow: true},
		}
	}
	if keys := set.GetRowKeys(); len(keys) > 0 && len(set.GetRowRanges()) == 0 {
		for _, k := range keys {
			s.mu.RLock()
			c, ok := s.rows[string(k)]
			s.mu.RUnlock()
			if ok {
				if err := stream.Send(&btpb.ReadRowsResponse{Chunks: []*btpb.ReadRowsResponse_CellChunk{chunk(string(k), c)}}); err != nil {
					return err
				}
			}
		}
		return nil
	}
	// Otherwise only the whole table (the Scans workload's InfiniteRange("")),
	// in responses of about 1 MiB (as ebbtable's server sends them).
	if !wholeTable(set) {
		return status.Error(codes.Unimplemented, "ceiling: only point reads and whole-table scans")
	}
	s.mu.Lock()
	if s.sorted == nil {
		s.sorted = make([]string, 0, len(s.rows))
		for k := range s.rows {
			s.sorted = append(s.sorted, k)
		}
		slices.Sort(s.sorted)
	}
	keys := s.sorted
	cells := make([]ceilingCell, len(keys))
	for i, k := range keys {
		cells[i] = s.rows[k]
	}
	s.mu.Unlock()
	resp, size := &btpb.ReadRowsResponse{}, 0
	for i, k := range keys {
		resp.Chunks = append(resp.Chunks, chunk(k, cells[i]))
		size += len(k) + len(cells[i].value)
		if size >= 1<<20 {
			if err := stream.Send(resp); err != nil {
				return err
			}
			resp, size = &btpb.ReadRowsResponse{}, 0
		}
	}
	if len(resp.Chunks) > 0 {
		return stream.Send(resp)
	}
	return nil
}

// wholeTable says whether a row set selects every row: none given, or one
// range from the empty key with no end.
func wholeTable(set *btpb.RowSet) bool {
	rs := set.GetRowRanges()
	if len(set.GetRowKeys()) > 0 || len(rs) > 1 {
		return false
	}
	return len(rs) == 0 || (len(rs[0].GetStartKeyClosed()) == 0 && len(rs[0].GetStartKeyOpen()) == 0 &&
		rs[0].GetEndKey() == nil)
}
