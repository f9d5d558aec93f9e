package server

import (
	"context"
	"fmt"
	"slices"
	"time"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/filter"
	"github.com/ebbtable/ebbtable/server/convert"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// dataServer serves the Bigtable Data API v2.
type dataServer struct {
	btpb.UnimplementedBigtableServer
	s *Server
}

// maxChunkValue is the largest piece of a cell value sent in one chunk, and
// maxResponseBytes the size at which a ReadRows response is flushed.
const (
	maxChunkValue    = 1 << 20
	maxResponseBytes = 1 << 20
)

func (d *dataServer) compileFilter(f *btpb.RowFilter) (table.RowFilter, error) {
	if f == nil {
		return nil, nil
	}
	model, err := convert.FilterFromProto(f)
	if err != nil {
		return nil, err
	}
	prog, err := filter.Compile(model, filter.Options{})
	if err != nil {
		return nil, err
	}
	if prog == nil {
		return nil, nil
	}
	return prog, nil
}

func rowSetToRequest(rs *btpb.RowSet, req *table.ReadRequest) error {
	if rs == nil {
		return nil
	}
	req.Keys = rs.GetRowKeys()
	for _, r := range rs.GetRowRanges() {
		var rg table.RowRange
		switch k := r.StartKey.(type) {
		case *btpb.RowRange_StartKeyClosed:
			rg.Start = k.StartKeyClosed
		case *btpb.RowRange_StartKeyOpen:
			rg.Start, rg.StartOpen = k.StartKeyOpen, true
		}
		switch k := r.EndKey.(type) {
		case *btpb.RowRange_EndKeyOpen:
			if len(k.EndKeyOpen) > 0 {
				rg.End = k.EndKeyOpen
			}
		case *btpb.RowRange_EndKeyClosed:
			if len(k.EndKeyClosed) > 0 {
				rg.End, rg.EndClosed = k.EndKeyClosed, true
			}
		}
		if rg.Start == nil {
			rg.Start = []byte{}
		}
		req.Ranges = append(req.Ranges, rg)
	}
	return nil
}

// ReadRows streams rows as cell chunks, splitting large values.
func (d *dataServer) ReadRows(req *btpb.ReadRowsRequest, stream btpb.Bigtable_ReadRowsServer) error {
	if req.GetMaterializedViewName() != "" {
		return d.readMaterializedView(req, stream) // server/views.go
	}
	ref, view, err := d.dataTable(req.GetTableName(), req.GetAuthorizedViewName())
	if err != nil {
		return toStatus(err)
	}
	if handled, err := routeStream(d, stream.Context(), ref.instance, req.GetAppProfileId(), singleRow(req.GetRows()),
		func(ctx context.Context, c btpb.BigtableClient) (recver[btpb.ReadRowsResponse], error) {
			return c.ReadRows(ctx, req)
		}, stream.Send); handled {
		return err
	}
	// Transient: the chunk writer copies each row into its response, and
	// nothing else keeps one.
	rr := table.ReadRequest{Limit: req.GetRowsLimit(), Reversed: req.GetReversed(), MaxRowBytes: d.s.sec.opts.MaxRowBytes, Transient: true}
	if rr.Limit < 0 {
		return status.Error(codes.InvalidArgument, "ebbtable: rows_limit must not be negative")
	}
	if err := rowSetToRequest(req.GetRows(), &rr); err != nil {
		return toStatus(err)
	}
	if rr.Filter, err = d.compileFilter(view.filter(req.GetFilter())); err != nil {
		return toStatus(err)
	}
	// A request whose row set names only empty ranges reads nothing.
	if rs := req.GetRows(); rs != nil && len(rs.RowKeys) == 0 && len(rs.RowRanges) > 0 && len(rr.Ranges) == 0 {
		return nil
	}
	// Through an authorized view, only its rows (see authview.go).
	if view != nil {
		if view.restrictRows(&rr); len(rr.Keys) == 0 && len(rr.Ranges) == 0 {
			return nil
		}
	}
	w := chunkWriter{stream: stream}
	// The clock and the counts only for a request that asks for them.
	full := req.GetRequestStatsView() == btpb.ReadRowsRequest_REQUEST_STATS_FULL
	var start time.Time
	if full {
		start = time.Now()
		rr.Stats = new(table.ReadStats) // not on every read's heap
	}
	emit := w.row
	if showExpiry(stream.Context()) {
		emit = func(r cell.Row) error { return w.row(labelExpiry(r)) }
	}
	err = d.s.engine.ReadRows(stream.Context(), ref.instance, ref.table, rr, emit)
	if err != nil {
		return toStatus(err)
	}
	if err := w.flush(); err != nil {
		return err
	}
	if !full {
		return nil
	}
	return stream.Send(&btpb.ReadRowsResponse{RequestStats: &btpb.RequestStats{
		StatsView: &btpb.RequestStats_FullReadStatsView{FullReadStatsView: &btpb.FullReadStatsView{
			ReadIterationStats: &btpb.ReadIterationStats{
				RowsSeenCount: rr.Stats.RowsSeen, RowsReturnedCount: rr.Stats.RowsReturned,
				CellsSeenCount: rr.Stats.CellsSeen, CellsReturnedCount: rr.Stats.CellsReturned,
			},
			RequestLatencyStats: &btpb.RequestLatencyStats{FrontendServerLatency: durationpb.New(time.Since(start))},
		}},
	}})
}

// SampleRowKeys returns the table's split points.
func (d *dataServer) SampleRowKeys(req *btpb.SampleRowKeysRequest, stream btpb.Bigtable_SampleRowKeysServer) error {
	if req.GetMaterializedViewName() != "" {
		return d.sampleMaterializedView(req, stream) // server/views.go
	}
	ref, view, err := d.dataTable(req.GetTableName(), req.GetAuthorizedViewName())
	if err != nil {
		return toStatus(err)
	}
	if handled, err := routeStream(d, stream.Context(), ref.instance, req.GetAppProfileId(), nil,
		func(ctx context.Context, c btpb.BigtableClient) (recver[btpb.SampleRowKeysResponse], error) {
			return c.SampleRowKeys(ctx, req)
		}, stream.Send); handled {
		return err
	}
	samples, err := d.s.engine.SampleRowKeys(ref.instance, ref.table)
	if err != nil {
		return toStatus(err)
	}
	if samples, err = sampleWithin(samples, view, req); err != nil {
		return toStatus(err)
	}
	for _, s := range samples {
		if err := stream.Send(&btpb.SampleRowKeysResponse{RowKey: s.Key, OffsetBytes: s.Offset}); err != nil {
			return err
		}
	}
	return nil
}

// mutations converts request mutations, applying a native cell TTL from
// the request metadata when one is given.
func (d *dataServer) mutations(ms []*btpb.Mutation, exp expiry) ([]table.Mutation, error) {
	return d.appendMutations(make([]table.Mutation, 0, len(ms)), ms, exp)
}

// appendMutations is mutations appending to out.
func (d *dataServer) appendMutations(out []table.Mutation, ms []*btpb.Mutation, exp expiry) ([]table.Mutation, error) {
	for i, m := range ms {
		var tm table.Mutation
		switch x := m.GetMutation().(type) {
		case *btpb.Mutation_SetCell_:
			tm = table.Mutation{
				Kind:          table.SetCell,
				Family:        x.SetCell.GetFamilyName(),
				Qualifier:     x.SetCell.GetColumnQualifier(),
				Timestamp:     x.SetCell.GetTimestampMicros(),
				Value:         x.SetCell.GetValue(),
				AutoTimestamp: m.GetTimestampOrigin() == btpb.Mutation_CLIENT_AUTO_GENERATED,
				TTLMicros:     exp.ttl,
				ExpireAt:      exp.at,
			}
		case *btpb.Mutation_DeleteFromColumn_:
			tm = table.Mutation{Kind: table.DeleteFromColumn, Family: x.DeleteFromColumn.GetFamilyName(), Qualifier: x.DeleteFromColumn.GetColumnQualifier()}
			if tr := x.DeleteFromColumn.GetTimeRange(); tr != nil {
				tm.StartTS, tm.EndTS = tr.GetStartTimestampMicros(), tr.GetEndTimestampMicros()
			}
		case *btpb.Mutation_DeleteFromFamily_:
			tm = table.Mutation{Kind: table.DeleteFromFamily, Family: x.DeleteFromFamily.GetFamilyName()}
		case *btpb.Mutation_DeleteFromRow_:
			tm = table.Mutation{Kind: table.DeleteFromRow}
		case *btpb.Mutation_AddToCell_:
			a := x.AddToCell
			in, ok := a.GetInput().GetKind().(*btpb.Value_IntValue)
			if !ok {
				return nil, fmt.Errorf("%w: mutation %d: AddToCell takes an int64 input", errInvalid, i)
			}
			tm = table.Mutation{Kind: table.AddToCell, Family: a.GetFamilyName(), Qualifier: a.GetColumnQualifier().GetRawValue(),
				Timestamp: a.GetTimestamp().GetRawTimestampMicros(), IntInput: in.IntValue}
		case *btpb.Mutation_MergeToCell_:
			a := x.MergeToCell
			in, ok := a.GetInput().GetKind().(*btpb.Value_RawValue)
			if !ok {
				return nil, fmt.Errorf("%w: mutation %d: MergeToCell takes raw bytes", errInvalid, i)
			}
			tm = table.Mutation{Kind: table.MergeToCell, Family: a.GetFamilyName(), Qualifier: a.GetColumnQualifier().GetRawValue(),
				Timestamp: a.GetTimestamp().GetRawTimestampMicros(), Value: in.RawValue}
		default:
			return nil, fmt.Errorf("%w: mutation %d is empty", errInvalid, i)
		}
		out = append(out, tm)
	}
	return out, nil
}

// MutateRow applies mutations to one row atomically.
func (d *dataServer) MutateRow(ctx context.Context, req *btpb.MutateRowRequest) (*btpb.MutateRowResponse, error) {
	// A single-row write of SetCells the codec kept as bytes
	// (mutaterowswire.go).
	wire := d.s.sec.wire.take(req)
	ref, view, err := d.dataTable(req.GetTableName(), req.GetAuthorizedViewName())
	if err != nil {
		return nil, toStatus(err)
	}
	if resp, handled, err := routeUnary(d, ctx, ref.instance, req.GetAppProfileId(), false, req.GetRowKey(),
		func(ctx context.Context, c btpb.BigtableClient) (*btpb.MutateRowResponse, error) {
			if wire != nil {
				wire.decodeRowInto(req)
			}
			return c.MutateRow(ctx, req)
		}); handled {
		return resp, err
	}
	x, err := cellExpiry(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	if wire != nil && view == nil {
		// From the bytes into the batch: MutateRows' path for one entry,
		// whose errors are MutateRow's (the same checks, in order).
		wire.exp = x
		errs, err := d.s.engine.MutateRowsFrom(ref.instance, ref.table, wire)
		if err == nil {
			err = errs[0]
		}
		if err != nil {
			return nil, toStatus(err)
		}
		return &btpb.MutateRowResponse{}, nil
	}
	if wire != nil {
		wire.decodeRowInto(req)
	}
	if err := view.checkMutations(req.GetRowKey(), req.GetMutations()); err != nil {
		return nil, err
	}
	muts, err := d.mutations(req.GetMutations(), x)
	if err != nil {
		return nil, toStatus(err)
	}
	if err := d.s.engine.MutateRow(ref.instance, ref.table, req.GetRowKey(), muts); err != nil {
		return nil, toStatus(err)
	}
	return &btpb.MutateRowResponse{}, nil
}

// MaxEntriesPerMutateRows is Bigtable's limit on entries in one MutateRows.
const MaxEntriesPerMutateRows = 100000

// MutateRows applies each entry atomically and reports a status per entry.
func (d *dataServer) MutateRows(req *btpb.MutateRowsRequest, stream btpb.Bigtable_MutateRowsServer) error {
	// A bulk write of SetCells the codec kept as bytes (mutaterowswire.go).
	wire := d.s.sec.wire.take(req)
	if wire != nil {
		defer wire.release()
	}
	ref, view, err := d.dataTable(req.GetTableName(), req.GetAuthorizedViewName())
	if err != nil {
		return toStatus(err)
	}
	if handled, err := routeStream(d, stream.Context(), ref.instance, req.GetAppProfileId(), nil,
		func(ctx context.Context, c btpb.BigtableClient) (recver[btpb.MutateRowsResponse], error) {
			if wire != nil {
				wire.decodeInto(req)
			}
			return c.MutateRows(ctx, req)
		}, stream.Send); handled {
		return err
	}
	if wire != nil && view == nil {
		return d.mutateRowsWire(ref, wire, stream)
	}
	if wire != nil {
		wire.decodeInto(req)
	}
	if len(req.GetEntries()) == 0 {
		return status.Error(codes.InvalidArgument, "ebbtable: MutateRows needs at least one entry")
	}
	if len(req.GetEntries()) > MaxEntriesPerMutateRows {
		return status.Errorf(codes.InvalidArgument, "ebbtable: %d entries in one MutateRows, the limit is %d", len(req.GetEntries()), MaxEntriesPerMutateRows)
	}
	x, err := cellExpiry(stream.Context())
	if err != nil {
		return toStatus(err)
	}
	entries := make([]table.RowMutation, len(req.GetEntries()))
	convErrs := make([]error, len(entries))
	// Every entry's mutations share one backing array.
	n := 0
	for _, e := range req.GetEntries() {
		n += len(e.GetMutations())
	}
	all := make([]table.Mutation, 0, n)
	for i, e := range req.GetEntries() {
		if err := view.checkMutations(e.GetRowKey(), e.GetMutations()); err != nil {
			convErrs[i] = err
			continue
		}
		more, err := d.appendMutations(all, e.GetMutations(), x)
		if err != nil {
			convErrs[i] = err
			continue
		}
		entries[i] = table.RowMutation{Row: e.GetRowKey(), Mutations: more[len(all):len(more):len(more)]}
		all = more
	}
	// Entries that failed conversion are sent to the engine as empty and
	// their conversion error reported instead.
	errs, err := d.s.engine.MutateRows(ref.instance, ref.table, filterEntries(entries, convErrs))
	if err != nil {
		return toStatus(err)
	}
	return d.sendMutateRows(stream, len(entries), errs, convErrs)
}

// mutateRowsWire is MutateRows for a request the codec kept as bytes: its
// entries go from them into the engine's batch. It checks what MutateRows
// does, in the same order (the codec let through only requests of 1 to
// MaxEntriesPerMutateRows entries of SetCells, whose conversion cannot
// fail; the caller, only requests not made through an authorized view).
func (d *dataServer) mutateRowsWire(ref tableRef, w *wireEntries, stream btpb.Bigtable_MutateRowsServer) error {
	x, err := cellExpiry(stream.Context())
	if err != nil {
		return toStatus(err)
	}
	w.exp = x
	errs, err := d.s.engine.MutateRowsFrom(ref.instance, ref.table, w)
	if err != nil {
		return toStatus(err)
	}
	return d.sendMutateRows(stream, w.n, errs, nil)
}

// sendMutateRows answers a MutateRows of n entries: convErrs (nil: none)
// has the entries that failed conversion, errs the engine's answers for
// the others, in order.
func (d *dataServer) sendMutateRows(stream btpb.Bigtable_MutateRowsServer, n int, errs, convErrs []error) error {
	if !slices.ContainsFunc(errs, func(err error) bool { return err != nil }) && !slices.ContainsFunc(convErrs, func(err error) bool { return err != nil }) {
		return stream.Send(d.s.sec.okResps.response(n))
	}
	resp := &btpb.MutateRowsResponse{Entries: make([]*btpb.MutateRowsResponse_Entry, n)}
	// One allocation for the entries, and one OK status they share (the
	// response is only marshalled).
	out := make([]btpb.MutateRowsResponse_Entry, n)
	ok := okStatus
	j := 0
	for i := range n {
		var e error
		if convErrs != nil && convErrs[i] != nil {
			e = convErrs[i]
		} else {
			e = errs[j]
			j++
		}
		st := ok
		if e != nil {
			st = status.Convert(toStatus(e)).Proto()
		}
		out[i].Index, out[i].Status = int64(i), st
		resp.Entries[i] = &out[i]
	}
	return stream.Send(resp)
}

func filterEntries(entries []table.RowMutation, errs []error) []table.RowMutation {
	if !slices.ContainsFunc(errs, func(err error) bool { return err != nil }) {
		return entries
	}
	out := make([]table.RowMutation, 0, len(entries))
	for i, e := range entries {
		if errs[i] == nil {
			out = append(out, e)
		}
	}
	return out
}

// CheckAndMutateRow applies one of two mutation lists depending on a
// predicate filter.
func (d *dataServer) CheckAndMutateRow(ctx context.Context, req *btpb.CheckAndMutateRowRequest) (*btpb.CheckAndMutateRowResponse, error) {
	ref, view, err := d.dataTable(req.GetTableName(), req.GetAuthorizedViewName())
	if err != nil {
		return nil, toStatus(err)
	}
	if resp, handled, err := routeUnary(d, ctx, ref.instance, req.GetAppProfileId(), true, req.GetRowKey(),
		func(ctx context.Context, c btpb.BigtableClient) (*btpb.CheckAndMutateRowResponse, error) {
			return c.CheckAndMutateRow(ctx, req)
		}); handled {
		return resp, err
	}
	if err := view.checkMutations(req.GetRowKey(), append(append([]*btpb.Mutation{}, req.GetTrueMutations()...), req.GetFalseMutations()...)); err != nil {
		return nil, err
	}
	pred, err := d.compileFilter(view.filter(req.GetPredicateFilter()))
	if err != nil {
		return nil, toStatus(err)
	}
	x, err := cellExpiry(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	tm, err := d.mutations(req.GetTrueMutations(), x)
	if err != nil {
		return nil, toStatus(err)
	}
	fm, err := d.mutations(req.GetFalseMutations(), x)
	if err != nil {
		return nil, toStatus(err)
	}
	matched, err := d.s.engine.CheckAndMutate(ref.instance, ref.table, req.GetRowKey(), pred, tm, fm)
	if err != nil {
		return nil, toStatus(err)
	}
	return &btpb.CheckAndMutateRowResponse{PredicateMatched: matched}, nil
}

// ReadModifyWriteRow appends to or increments cells and returns them.
func (d *dataServer) ReadModifyWriteRow(ctx context.Context, req *btpb.ReadModifyWriteRowRequest) (*btpb.ReadModifyWriteRowResponse, error) {
	ref, view, err := d.dataTable(req.GetTableName(), req.GetAuthorizedViewName())
	if err != nil {
		return nil, toStatus(err)
	}
	if resp, handled, err := routeUnary(d, ctx, ref.instance, req.GetAppProfileId(), true, req.GetRowKey(),
		func(ctx context.Context, c btpb.BigtableClient) (*btpb.ReadModifyWriteRowResponse, error) {
			return c.ReadModifyWriteRow(ctx, req)
		}); handled {
		return resp, err
	}
	if err := view.checkRules(req.GetRowKey(), req.GetRules()); err != nil {
		return nil, err
	}
	var rules []table.RMWRule
	for i, r := range req.GetRules() {
		tr := table.RMWRule{Family: r.GetFamilyName(), Qualifier: r.GetColumnQualifier()}
		switch x := r.GetRule().(type) {
		case *btpb.ReadModifyWriteRule_AppendValue:
			tr.IsAppend, tr.Append = true, x.AppendValue
		case *btpb.ReadModifyWriteRule_IncrementAmount:
			tr.Increment = x.IncrementAmount
		default:
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: read-modify-write rule %d has neither append_value nor increment_amount", i)
		}
		rules = append(rules, tr)
	}
	row, err := d.s.engine.ReadModifyWrite(ref.instance, ref.table, req.GetRowKey(), rules)
	if err != nil {
		return nil, toStatus(err)
	}
	return &btpb.ReadModifyWriteRowResponse{Row: rowToProto(row)}, nil
}

// rowToProto groups a row's cells into families and columns.
func rowToProto(r cell.Row) *btpb.Row {
	out := &btpb.Row{Key: r.Key}
	var fam *btpb.Family
	var col *btpb.Column
	for _, c := range r.Cells {
		if fam == nil || fam.Name != c.Family {
			fam = &btpb.Family{Name: c.Family}
			out.Families = append(out.Families, fam)
			col = nil
		}
		if col == nil || string(col.Qualifier) != string(c.Qualifier) {
			col = &btpb.Column{Qualifier: c.Qualifier}
			fam.Columns = append(fam.Columns, col)
		}
		col.Cells = append(col.Cells, &btpb.Cell{TimestampMicros: c.Timestamp, Value: c.Value, Labels: c.Labels})
	}
	return out
}

// PingAndWarm answers that the server is up.
func (d *dataServer) PingAndWarm(ctx context.Context, req *btpb.PingAndWarmRequest) (*btpb.PingAndWarmResponse, error) {
	inst, err := parseInstance(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	if resp, handled, err := routeUnary(d, ctx, inst, req.GetAppProfileId(), false, nil,
		func(ctx context.Context, c btpb.BigtableClient) (*btpb.PingAndWarmResponse, error) {
			return c.PingAndWarm(ctx, req)
		}); handled {
		return resp, err
	}
	return &btpb.PingAndWarmResponse{}, nil
}
