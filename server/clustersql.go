package server

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"math"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/cell"
	tablets "github.com/ebbtable/ebbtable/cluster"
	"github.com/ebbtable/ebbtable/sqlquery"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// SQL in cluster mode. A query reads its tables through the cluster's
// ReadRows (clusterData.ReadRows): the read is cut by tablet, the tablets
// this node owns are read here under their gates, the others are forwarded
// to their owners, in key order. So a query sent to any node sees every row
// of the table, wherever its tablets live. The read asks the owners for
// rows cut to the query's timestamp window and versions per column
// (sqlPushdown) and applies the query's whole cell filter here; a read cut short by a tablet move
// (UNAVAILABLE) is resumed after the last row received, as the official
// client resumes ReadRows, so a query runs across moves.
//
// What stays on this node: the kept rows of materialized views (they are
// maintained from this node's writes) and a table that is not a cluster
// table. Logical views run their query, so they read through the cluster.

// sqlReadRetries bounds the resumptions of one read that make no progress.
const sqlReadRetries = 10

// clusterSQL makes the catalog's table reads cluster-wide in cluster mode.
func (s *Server) clusterSQL(cat *sqlquery.EngineCatalog) {
	if s.cluster == nil {
		return
	}
	x := &clusterData{dataServer: &dataServer{s: s}, c: s.cluster}
	inst := cat.Instance
	cat.Read = func(ctx context.Context, name string, req table.ReadRequest, fn func(cell.Row) error) error {
		return x.sqlRead(ctx, tableRef{instance: inst, table: name}, req, fn)
	}
}

// errSQLReadDone stops a read whose rows limit is reached.
var errSQLReadDone = errors.New("ebbtable: sql read done")

// sqlRead reads rows as Engine.ReadRows does, through the cluster.
func (x *clusterData) sqlRead(ctx context.Context, ref tableRef, req table.ReadRequest, fn func(cell.Row) error) error {
	if _, ok := x.c.directory(ctx, ref); !ok || req.Reversed {
		return x.s.engine.ReadRows(ctx, ref.instance, ref.table, req, fn)
	}
	if req.Limit < 0 {
		return status.Error(codes.InvalidArgument, "ebbtable: rows limit must not be negative")
	}
	// ExecuteQuery was routed between replicated clusters already (it
	// chose this one): the query's reads are not routed again.
	md, _ := metadata.FromIncomingContext(ctx)
	md = md.Copy()
	md.Set(MetaRoutedBy, cmp.Or(x.s.opts.ClusterID, "local"))
	ctx = withIncoming(ctx, md)
	keys, ranges := sqlRowSet(req)
	var sent int64
	var last []byte // the key of the last row received
	failures := 0
	for {
		rr := &btpb.ReadRowsRequest{TableName: ref.name(), Rows: &btpb.RowSet{RowKeys: keys}}
		for _, r := range ranges {
			rr.Rows.RowRanges = append(rr.Rows.RowRanges, fromRange(r))
		}
		rr.Filter = sqlPushdown(req.Filter)
		if req.Limit > 0 && req.Filter == nil {
			rr.RowsLimit = req.Limit - sent
		}
		progress := false
		dec := &rowDecoder{fn: func(r cell.Row) error {
			last, progress = r.Key, true
			if req.Filter != nil {
				r = req.Filter.Apply(r)
			}
			if len(r.Cells) == 0 {
				return nil
			}
			if err := fn(r); err != nil {
				return err
			}
			sent++
			if req.Limit > 0 && sent >= req.Limit {
				return errSQLReadDone
			}
			return nil
		}}
		err := x.ReadRows(rr, &sqlReadStream{ctx: ctx, dec: dec})
		if err == nil || errors.Is(err, errSQLReadDone) {
			return nil
		}
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return err
		}
		if progress {
			failures = 0
		} else if failures++; failures > sqlReadRetries {
			return err
		}
		// Resume after the last row received.
		if last != nil {
			keys, ranges = sqlResumeAfter(keys, ranges, last)
			if len(keys) == 0 && len(ranges) == 0 {
				return nil
			}
		}
	}
}

// sqlPushdown is the part of a query's cell filter the owners can run,
// so they do not send versions the query drops: its timestamp window,
// then its versions per column. The whole filter still runs on the rows
// received (running it after this cut gives the same cells).
func sqlPushdown(f table.RowFilter) *btpb.RowFilter {
	lo, hi, versions, ok := sqlquery.CellBounds(f)
	if !ok {
		return nil
	}
	var chain []*btpb.RowFilter
	tr := &btpb.TimestampRange{}
	if lo > 0 {
		tr.StartTimestampMicros = lo
	}
	if hi >= 0 && hi < math.MaxInt64 {
		tr.EndTimestampMicros = hi + 1 // exclusive
	}
	if tr.StartTimestampMicros != 0 || tr.EndTimestampMicros != 0 {
		chain = append(chain, &btpb.RowFilter{Filter: &btpb.RowFilter_TimestampRangeFilter{TimestampRangeFilter: tr}})
	}
	if versions > 0 && versions <= math.MaxInt32 {
		chain = append(chain, &btpb.RowFilter{Filter: &btpb.RowFilter_CellsPerColumnLimitFilter{CellsPerColumnLimitFilter: int32(versions)}})
	}
	switch len(chain) {
	case 0:
		return nil
	case 1:
		return chain[0]
	}
	return &btpb.RowFilter{Filter: &btpb.RowFilter_Chain_{Chain: &btpb.RowFilter_Chain{Filters: chain}}}
}

// sqlRowSet is a read request's rows as sorted keys and half-open ranges;
// the whole table when it names none.
func sqlRowSet(req table.ReadRequest) ([][]byte, []tablets.Range) {
	if len(req.Keys) == 0 && len(req.Ranges) == 0 {
		return nil, []tablets.Range{{Start: []byte{}}}
	}
	keys := append([][]byte(nil), req.Keys...)
	var ranges []tablets.Range
	for _, r := range req.Ranges {
		c := tablets.Range{Start: r.Start, End: r.End}
		if c.Start == nil {
			c.Start = []byte{}
		}
		if r.StartOpen {
			c.Start = append(bytes.Clone(r.Start), 0)
		}
		if r.EndClosed && r.End != nil {
			c.End = append(bytes.Clone(r.End), 0)
		}
		ranges = append(ranges, c)
	}
	return keys, ranges
}

// sqlResumeAfter keeps of keys and ranges what lies after key last.
func sqlResumeAfter(keys [][]byte, ranges []tablets.Range, last []byte) ([][]byte, []tablets.Range) {
	var ks [][]byte
	for _, k := range keys {
		if bytes.Compare(k, last) > 0 {
			ks = append(ks, k)
		}
	}
	from := append(bytes.Clone(last), 0)
	var rs []tablets.Range
	for _, r := range ranges {
		if len(r.End) > 0 && bytes.Compare(r.End, from) <= 0 {
			continue
		}
		if bytes.Compare(r.Start, from) < 0 {
			r.Start = from
		}
		rs = append(rs, r)
	}
	return ks, rs
}

// sqlReadStream is the stream the cluster's ReadRows answers a query's
// read on: its responses are decoded into rows.
type sqlReadStream struct {
	grpc.ServerStream // nil: only the methods below are used
	ctx               context.Context
	dec               *rowDecoder
}

func (s *sqlReadStream) Context() context.Context            { return s.ctx }
func (s *sqlReadStream) SetHeader(metadata.MD) error         { return nil }
func (s *sqlReadStream) SendHeader(metadata.MD) error        { return nil }
func (s *sqlReadStream) SetTrailer(metadata.MD)              {}
func (s *sqlReadStream) Send(r *btpb.ReadRowsResponse) error { return s.dec.response(r) }
func (s *sqlReadStream) SendMsg(m any) error {
	switch r := m.(type) {
	case *btpb.ReadRowsResponse:
		return s.dec.response(r)
	case *wireMessage:
		resp := &btpb.ReadRowsResponse{}
		if err := proto.Unmarshal(r.b, resp); err != nil {
			return status.Errorf(codes.Internal, "ebbtable: decode a read response: %v", err)
		}
		return s.dec.response(resp)
	}
	return status.Errorf(codes.Internal, "ebbtable: unexpected read response %T", m)
}

// rowDecoder assembles ReadRows cell chunks into rows, passing each
// committed row to fn.
type rowDecoder struct {
	fn      func(cell.Row) error
	row     cell.Row
	fam     string
	qual    []byte
	partial bool // the last cell's value continues in the next chunk
}

func (d *rowDecoder) response(r *btpb.ReadRowsResponse) error {
	for _, ch := range r.GetChunks() {
		if err := d.chunk(ch); err != nil {
			return err
		}
	}
	return nil
}

func (d *rowDecoder) chunk(ch *btpb.ReadRowsResponse_CellChunk) error {
	if ch.GetResetRow() {
		d.row, d.partial = cell.Row{}, false
		return nil
	}
	if d.partial {
		c := &d.row.Cells[len(d.row.Cells)-1]
		c.Value = append(c.Value, ch.GetValue()...)
	} else {
		if len(ch.GetRowKey()) > 0 {
			d.row = cell.Row{Key: bytes.Clone(ch.GetRowKey())}
		}
		if ch.GetFamilyName() != nil {
			d.fam = ch.GetFamilyName().GetValue()
		}
		if ch.GetQualifier() != nil {
			d.qual = bytes.Clone(ch.GetQualifier().GetValue())
		}
		d.row.Cells = append(d.row.Cells, cell.Cell{Family: d.fam, Qualifier: d.qual, Timestamp: ch.GetTimestampMicros(),
			Value: bytes.Clone(ch.GetValue()), Labels: ch.GetLabels()})
	}
	d.partial = ch.GetValueSize() > 0
	if ch.GetCommitRow() {
		row := d.row
		d.row = cell.Row{}
		return d.fn(row)
	}
	return nil
}
