package server

import (
	"bytes"
	"context"
	"io"
	"sort"
	"sync"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	tablets "github.com/ebbtable/ebbtable/cluster"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// clusterData is the Bigtable Data API in cluster mode. Each request is
// cut by tablet: a tablet this node owns is served by the local data
// server (holding the tablet's gate, so a move waits for it), any other is
// forwarded to its owner. Single-row operations go whole to the row's
// tablet, so they stay atomic and isolated; MutateRows is split by owner;
// ReadRows visits the tablets in key order (reverse order for a reversed
// read), carrying the rows limit along; SampleRowKeys answers the tablet
// boundaries with the owners' own samples between them. Methods not
// overridden here (change streams, PingAndWarm) are served from this
// node's data alone; SQL runs here but reads its tables through ReadRows
// (clustersql.go).
type clusterData struct {
	*dataServer
	c *clusterMember
}

// rowOp routes a single-row operation.
func rowOp[Resp any](x *clusterData, ctx context.Context, tableName, viewName string, row []byte, method string,
	local func(context.Context) (Resp, error), remote func(context.Context, btpb.BigtableClient) (Resp, error)) (Resp, error) {
	var zero Resp
	ref, err := tableOf(tableName, viewName)
	if err != nil {
		return local(ctx)
	}
	d, ok := x.c.directory(ctx, ref)
	if !ok {
		return local(ctx)
	}
	t, err := x.c.route(ctx, d, row)
	if err != nil {
		return zero, err
	}
	defer t.release()
	if t.local {
		return local(ctx)
	}
	x.c.forwarded.WithLabelValues(method).Inc()
	return remote(x.c.outgoing(x.dataServer, ctx, x.c.m.Revision()), t.client)
}

func (x *clusterData) MutateRow(ctx context.Context, req *btpb.MutateRowRequest) (*btpb.MutateRowResponse, error) {
	// Served as a message (routed, forwarded, written by its owner): a
	// request the codec kept as bytes is decoded here (mutaterowswire.go).
	if w := x.dataServer.s.sec.wire.take(req); w != nil {
		w.decodeRowInto(req)
	}
	return rowOp(x, ctx, req.GetTableName(), req.GetAuthorizedViewName(), req.GetRowKey(), "MutateRow",
		func(ctx context.Context) (*btpb.MutateRowResponse, error) { return x.dataServer.MutateRow(ctx, req) },
		func(ctx context.Context, c btpb.BigtableClient) (*btpb.MutateRowResponse, error) {
			return c.MutateRow(ctx, req)
		})
}

func (x *clusterData) CheckAndMutateRow(ctx context.Context, req *btpb.CheckAndMutateRowRequest) (*btpb.CheckAndMutateRowResponse, error) {
	return rowOp(x, ctx, req.GetTableName(), req.GetAuthorizedViewName(), req.GetRowKey(), "CheckAndMutateRow",
		func(ctx context.Context) (*btpb.CheckAndMutateRowResponse, error) {
			return x.dataServer.CheckAndMutateRow(ctx, req)
		},
		func(ctx context.Context, c btpb.BigtableClient) (*btpb.CheckAndMutateRowResponse, error) {
			return c.CheckAndMutateRow(ctx, req)
		})
}

func (x *clusterData) ReadModifyWriteRow(ctx context.Context, req *btpb.ReadModifyWriteRowRequest) (*btpb.ReadModifyWriteRowResponse, error) {
	return rowOp(x, ctx, req.GetTableName(), req.GetAuthorizedViewName(), req.GetRowKey(), "ReadModifyWriteRow",
		func(ctx context.Context) (*btpb.ReadModifyWriteRowResponse, error) {
			return x.dataServer.ReadModifyWriteRow(ctx, req)
		},
		func(ctx context.Context, c btpb.BigtableClient) (*btpb.ReadModifyWriteRowResponse, error) {
			return c.ReadModifyWriteRow(ctx, req)
		})
}

// sendOnly is a server stream whose Send goes to send (the local data
// server answering one piece of a request).
type sendOnly[T any] struct {
	grpc.ServerStream
	send func(*T) error
}

func (s sendOnly[T]) Send(m *T) error { return s.send(m) }

// rowRanges turns a row set's ranges into half-open ranges and back.
func toRanges(rs []*btpb.RowRange) []tablets.Range {
	out := make([]tablets.Range, 0, len(rs))
	for _, r := range rs {
		var c tablets.Range
		switch k := r.StartKey.(type) {
		case *btpb.RowRange_StartKeyClosed:
			c.Start = k.StartKeyClosed
		case *btpb.RowRange_StartKeyOpen:
			c.Start = append(append([]byte(nil), k.StartKeyOpen...), 0)
		}
		switch k := r.EndKey.(type) {
		case *btpb.RowRange_EndKeyOpen:
			c.End = k.EndKeyOpen
		case *btpb.RowRange_EndKeyClosed:
			if len(k.EndKeyClosed) > 0 {
				c.End = append(append([]byte(nil), k.EndKeyClosed...), 0)
			}
		}
		if c.Start == nil {
			c.Start = []byte{}
		}
		out = append(out, c)
	}
	return out
}

func fromRange(r tablets.Range) *btpb.RowRange {
	pr := &btpb.RowRange{StartKey: &btpb.RowRange_StartKeyClosed{StartKeyClosed: r.Start}}
	if len(r.End) > 0 {
		pr.EndKey = &btpb.RowRange_EndKeyOpen{EndKeyOpen: r.End}
	}
	return pr
}

// ReadRows reads the tablets the row set touches one after another.
func (x *clusterData) ReadRows(req *btpb.ReadRowsRequest, stream btpb.Bigtable_ReadRowsServer) error {
	ctx := stream.Context()
	ref, err := tableOf(req.GetTableName(), req.GetAuthorizedViewName())
	if err != nil || req.GetMaterializedViewName() != "" {
		return x.dataServer.ReadRows(req, stream)
	}
	d, ok := x.c.directory(ctx, ref)
	if !ok {
		return x.dataServer.ReadRows(req, stream)
	}
	if req.GetRowsLimit() < 0 {
		return status.Error(codes.InvalidArgument, "ebbtable: rows_limit must not be negative")
	}
	rs := req.GetRows()
	var pieces []tablets.Piece
	if rs == nil || (len(rs.GetRowKeys()) == 0 && len(rs.GetRowRanges()) == 0) {
		pieces = d.Cut(nil, []tablets.Range{{Start: []byte{}}})
	} else {
		keys := rs.GetRowKeys()
		sorted := make([][]byte, 0, len(keys))
		for _, k := range keys {
			sorted = append(sorted, k)
		}
		sort.Slice(sorted, func(i, j int) bool { return bytes.Compare(sorted[i], sorted[j]) < 0 })
		pieces = d.Cut(sorted, toRanges(rs.GetRowRanges()))
		if len(pieces) == 0 {
			return nil // only empty ranges: nothing to read
		}
	}
	if req.GetReversed() {
		for i, j := 0, len(pieces)-1; i < j; i, j = i+1, j-1 {
			pieces[i], pieces[j] = pieces[j], pieces[i]
		}
	}
	limit := req.GetRowsLimit()
	var rows int64
	count := func(n int64) { rows += n }
	for _, p := range pieces {
		if limit > 0 && rows >= limit {
			return nil
		}
		sub := proto.Clone(req).(*btpb.ReadRowsRequest)
		sub.Rows = &btpb.RowSet{RowKeys: p.Keys}
		for _, r := range p.Ranges {
			sub.Rows.RowRanges = append(sub.Rows.RowRanges, fromRange(r))
		}
		if limit > 0 {
			sub.RowsLimit = limit - rows
		}
		if err := x.readPiece(ctx, d, p, sub, stream, count); err != nil {
			return err
		}
	}
	return nil
}

// readPiece reads one tablet's part of a ReadRows.
func (x *clusterData) readPiece(ctx context.Context, d tablets.Directory, p tablets.Piece, sub *btpb.ReadRowsRequest, stream btpb.Bigtable_ReadRowsServer, count func(int64)) error {
	key := p.Tablet.Start
	if len(p.Keys) > 0 {
		key = p.Keys[0]
	} else if len(p.Ranges) > 0 {
		key = p.Ranges[0].Start
	}
	t, err := x.c.route(ctx, d, key)
	if err != nil {
		return err
	}
	if t.tablet.ID != p.Tablet.ID || !bytes.Equal(t.tablet.End, p.Tablet.End) {
		// The tablet split or merged since the directory was read: the
		// piece may reach past it. Ask the client to retry (it resumes
		// after the last row it received).
		t.release()
		return status.Error(codes.Unavailable, "ebbtable: tablets changed during the read; retry")
	}
	if t.local {
		return x.readLocal(ctx, d.Table, t, sub, stream, count) // releases t
	}
	defer t.release()
	x.c.forwarded.WithLabelValues("ReadRows").Inc()
	cs, err := t.client.ReadRows(x.c.outgoing(x.dataServer, ctx, x.c.m.Revision()), sub)
	if err != nil {
		return err
	}
	for {
		resp, err := cs.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		count(committedRows(resp))
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// MutateRows sends each owner its entries and answers every entry.
func (x *clusterData) MutateRows(req *btpb.MutateRowsRequest, stream btpb.Bigtable_MutateRowsServer) error {
	// The entries are grouped and forwarded as messages: a request the
	// codec kept as bytes is decoded here (mutaterowswire.go).
	if w := x.dataServer.s.sec.wire.take(req); w != nil {
		w.decodeInto(req)
		w.release()
	}
	ctx := stream.Context()
	ref, err := tableOf(req.GetTableName(), req.GetAuthorizedViewName())
	if err != nil {
		return x.dataServer.MutateRows(req, stream)
	}
	d, ok := x.c.directory(ctx, ref)
	if !ok || len(req.GetEntries()) == 0 || len(req.GetEntries()) > MaxEntriesPerMutateRows {
		return x.dataServer.MutateRows(req, stream)
	}
	// Group the entries by tablet, keeping their indices.
	groups := map[uint64][]int{}
	var order []uint64
	for i, e := range req.GetEntries() {
		id := d.Tablets[d.Locate(e.GetRowKey())].ID
		if _, ok := groups[id]; !ok {
			order = append(order, id)
		}
		groups[id] = append(groups[id], i)
	}
	out := make([]*btpb.MutateRowsResponse_Entry, len(req.GetEntries()))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, id := range order {
		idx := groups[id]
		wg.Add(1)
		go func() {
			defer wg.Done()
			entries, err := x.mutatePiece(ctx, d, req, idx)
			mu.Lock()
			defer mu.Unlock()
			for j, i := range idx {
				if err != nil {
					out[i] = &btpb.MutateRowsResponse_Entry{Index: int64(i), Status: status.Convert(err).Proto()}
				} else {
					e := entries[j]
					out[i] = &btpb.MutateRowsResponse_Entry{Index: int64(i), Status: e.GetStatus()}
				}
			}
		}()
	}
	wg.Wait()
	for i := range out {
		if out[i] == nil {
			out[i] = &btpb.MutateRowsResponse_Entry{Index: int64(i), Status: status.New(codes.Internal, "ebbtable: entry not answered").Proto()}
		}
	}
	return stream.Send(&btpb.MutateRowsResponse{Entries: out})
}

// mutatePiece applies one tablet's entries (indices idx of req) and
// returns their results in idx order.
func (x *clusterData) mutatePiece(ctx context.Context, d tablets.Directory, req *btpb.MutateRowsRequest, idx []int) ([]*btpb.MutateRowsResponse_Entry, error) {
	sub := proto.Clone(req).(*btpb.MutateRowsRequest)
	sub.Entries = make([]*btpb.MutateRowsRequest_Entry, len(idx))
	for j, i := range idx {
		sub.Entries[j] = req.GetEntries()[i]
	}
	t, err := x.c.route(ctx, d, sub.Entries[0].GetRowKey())
	if err != nil {
		return nil, err
	}
	defer t.release()
	for _, e := range sub.Entries {
		if !t.tablet.Contains(e.GetRowKey()) {
			return nil, status.Error(codes.Unavailable, "ebbtable: tablets changed during the call; retry")
		}
	}
	res := make([]*btpb.MutateRowsResponse_Entry, len(idx))
	collect := func(resp *btpb.MutateRowsResponse) error {
		for _, e := range resp.GetEntries() {
			if e.GetIndex() >= 0 && int(e.GetIndex()) < len(res) {
				res[e.GetIndex()] = e
			}
		}
		return nil
	}
	if t.local {
		if err := x.dataServer.MutateRows(sub, sendOnly[btpb.MutateRowsResponse]{ServerStream: grpcStreamOf(ctx), send: collect}); err != nil {
			return nil, err
		}
	} else {
		x.c.forwarded.WithLabelValues("MutateRows").Inc()
		cs, err := t.client.MutateRows(x.c.outgoing(x.dataServer, ctx, x.c.m.Revision()), sub)
		if err != nil {
			return nil, err
		}
		for {
			resp, err := cs.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, err
			}
			collect(resp)
		}
	}
	for j := range res {
		if res[j] == nil {
			return nil, status.Error(codes.Internal, "ebbtable: the owner left an entry unanswered")
		}
	}
	return res, nil
}

// ctxStream is a server stream that only carries a context (the local
// data server reads Context and Send of the streams it is given).
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s ctxStream) Context() context.Context { return s.ctx }

func grpcStreamOf(ctx context.Context) grpc.ServerStream { return ctxStream{ctx: ctx} }

// SampleRowKeys answers every tablet boundary, with each owner's own
// samples inside its tablets, offsets accumulated across tablets.
func (x *clusterData) SampleRowKeys(req *btpb.SampleRowKeysRequest, stream btpb.Bigtable_SampleRowKeysServer) error {
	ctx := stream.Context()
	ref, err := tableOf(req.GetTableName(), req.GetAuthorizedViewName())
	if err != nil || req.GetMaterializedViewName() != "" || forwardedRev(ctx) >= 0 {
		return x.dataServer.SampleRowKeys(req, stream) // a forwarded call: this node's samples
	}
	d, ok := x.c.directory(ctx, ref)
	if !ok {
		return x.dataServer.SampleRowKeys(req, stream)
	}
	type sample struct {
		key []byte
		inc int64
	}
	byNode := map[string][]sample{}
	for _, t := range d.Tablets {
		if _, ok := byNode[t.Owner]; ok {
			continue
		}
		var got []*btpb.SampleRowKeysResponse
		keep := func(r *btpb.SampleRowKeysResponse) error { got = append(got, r); return nil }
		if t.Owner == x.c.opts.NodeID {
			if err := x.dataServer.SampleRowKeys(req, sendOnly[btpb.SampleRowKeysResponse]{ServerStream: stream, send: keep}); err != nil {
				return err
			}
		} else {
			n, ok := x.c.m.Node(t.Owner)
			if !ok {
				byNode[t.Owner] = nil // down: its tablets answer boundaries only
				continue
			}
			cc, err := x.c.conn(n.Addr)
			if err != nil {
				return status.Errorf(codes.Unavailable, "ebbtable: node %s: %v", n.ID, err)
			}
			cs, err := btpb.NewBigtableClient(cc).SampleRowKeys(x.c.outgoing(x.dataServer, ctx, x.c.m.Revision()), req)
			if err != nil {
				return err
			}
			for {
				r, err := cs.Recv()
				if err == io.EOF {
					break
				}
				if err != nil {
					return err
				}
				got = append(got, r)
			}
		}
		var prev int64
		ss := make([]sample, 0, len(got))
		for _, r := range got {
			ss = append(ss, sample{key: r.GetRowKey(), inc: r.GetOffsetBytes() - prev})
			prev = r.GetOffsetBytes()
		}
		byNode[t.Owner] = ss
	}
	var offset int64
	for i, t := range d.Tablets {
		last := i == len(d.Tablets)-1
		for _, s := range byNode[t.Owner] {
			in := len(s.key) > 0 && t.Contains(s.key) && !bytes.Equal(s.key, t.Start)
			if last && len(s.key) == 0 {
				in = true // the owner's final sample covers the table's end
			}
			if !in && !(len(s.key) == 0 && len(t.End) == 0) {
				continue
			}
			offset += max(s.inc, 0)
			if len(s.key) == 0 {
				continue // the end sample is sent once, below
			}
			if err := stream.Send(&btpb.SampleRowKeysResponse{RowKey: s.key, OffsetBytes: offset}); err != nil {
				return err
			}
		}
		if !last {
			if err := stream.Send(&btpb.SampleRowKeysResponse{RowKey: t.End, OffsetBytes: offset}); err != nil {
				return err
			}
		}
	}
	return stream.Send(&btpb.SampleRowKeysResponse{RowKey: []byte{}, OffsetBytes: offset})
}
