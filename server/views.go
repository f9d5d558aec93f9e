package server

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/sqlquery"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Logical and materialized views are instance metadata (protojson of
// adminpb.LogicalView and adminpb.MaterializedView). Both are queried by
// name in SQL's FROM; a materialized view is also read with ReadRows and
// SampleRowKeys. A materialized view grouping one table is maintained
// incrementally (mviewmaint.go); any other is computed when read (see
// docs/sql.md).
const (
	kindLogicalView      = "logicalview"
	kindMaterializedView = "materializedview"
)

// view is a stored view of either kind.
type sqlView interface {
	proto.Message
	GetName() string
	GetQuery() string
	GetDeletionProtection() bool
}

func (s *Server) loadView(kind, inst, id string, into sqlView) (bool, error) {
	found := false
	err := s.engine.InstanceMeta(kind, inst, func(_, name string, v []byte) error {
		if name != id {
			return nil
		}
		found = true
		return protojson.Unmarshal(v, into)
	})
	return found, err
}

func (s *Server) listViews(kind, inst string, fn func(v []byte) error) error {
	return s.engine.InstanceMeta(kind, inst, func(_, _ string, v []byte) error { return fn(v) })
}

// viewQuery looks a name up among the instance's logical and
// materialized views.
func (s *Server) viewQuery(inst, name string) (string, bool) {
	lv := &adminpb.LogicalView{}
	if ok, err := s.loadView(kindLogicalView, inst, name, lv); err == nil && ok {
		return lv.GetQuery(), true
	}
	mv := &adminpb.MaterializedView{}
	if ok, err := s.loadView(kindMaterializedView, inst, name, mv); err == nil && ok {
		return mv.GetQuery(), true
	}
	return "", false
}

// catalog is the SQL catalog of one instance: a maintained materialized
// view is read from its stored rows (mviewread.go).
func (s *Server) catalog(inst string) sqlquery.EngineCatalog {
	c := s.tableCatalog(inst)
	c.Kept = func(name string) bool { return s.viewKept(inst, name) }
	c.ScanKept = func(ctx context.Context, name string, ranges []table.RowRange, after []byte, fn func(pos []byte, row []sqlquery.Value) error) (bool, error) {
		return s.scanKept(ctx, inst, name, ranges, after, fn)
	}
	return c
}

// tableCatalog is the SQL catalog of one instance in which every view
// runs its query; view maintenance plans with it.
func (s *Server) tableCatalog(inst string) sqlquery.EngineCatalog {
	return sqlquery.EngineCatalog{Engine: s.engine, Instance: inst, Views: func(name string) (string, bool) { return s.viewQuery(inst, name) }}
}

// sqlStatus maps query errors to gRPC status codes.
func sqlStatus(err error) error {
	if errors.Is(err, sqlquery.ErrInvalid) || errors.Is(err, sqlquery.ErrNoTable) {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return toStatus(err)
}

func validViewID(id string) error {
	if id == "" || strings.ContainsAny(id, "/`") || len(id) > 128 {
		return status.Errorf(codes.InvalidArgument, "ebbtable: invalid view id %q", id)
	}
	return nil
}

// checkViewQuery plans a view's query against the instance as it is; a
// materialized view's must also follow Cloud Bigtable's rules (sqlquery's
// MaterializedKey, mvrules.go).
func (s *Server) checkViewQuery(kind, inst, q string) error {
	if strings.TrimSpace(q) == "" {
		return status.Error(codes.InvalidArgument, "ebbtable: a view needs a query")
	}
	plan, err := sqlquery.Prepare(s.tableCatalog(inst), q, nil)
	if err != nil {
		return sqlStatus(err)
	}
	if kind == kindMaterializedView {
		err := plan.CheckMaterialized()
		if err == nil && !s.opts.AnyViewQuery {
			_, err = plan.MaterializedKey(q)
		}
		if err != nil {
			return sqlStatus(err)
		}
	}
	return nil
}

func (s *Server) createView(kind, coll, parent, id string, v sqlView, meta func(now *timestamppb.Timestamp) proto.Message) (*longrunningpb.Operation, error) {
	inst, err := parseInstance(parent)
	if err != nil {
		return nil, toStatus(err)
	}
	if err := validViewID(id); err != nil {
		return nil, err
	}
	if v == nil {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: the view is missing")
	}
	if err := s.checkViewQuery(kind, inst, v.GetQuery()); err != nil {
		return nil, err
	}
	s.inst.mu.Lock()
	defer s.inst.mu.Unlock()
	if _, ok := s.viewQuery(inst, id); ok {
		return nil, status.Errorf(codes.AlreadyExists, "ebbtable: view %s/%s/%s already exists", inst, coll, id)
	}
	if err := s.putView(kind, inst, coll, id, v); err != nil {
		return nil, err
	}
	if kind == kindMaterializedView {
		s.mviews.changed()
	}
	return s.ops.done(v.GetName(), v, meta(timestamppb.New(s.opts.Clock.Now())))
}

func (s *Server) putView(kind, inst, coll, id string, v sqlView) error {
	switch x := v.(type) {
	case *adminpb.LogicalView:
		x.Name, x.Etag = inst+"/"+coll+"/"+id, fmt.Sprint(s.opts.Clock.Now().UnixNano())
	case *adminpb.MaterializedView:
		x.Name, x.Etag = inst+"/"+coll+"/"+id, fmt.Sprint(s.opts.Clock.Now().UnixNano())
	}
	b, err := protojson.Marshal(v)
	if err != nil {
		return status.Errorf(codes.Internal, "ebbtable: encode view: %v", err)
	}
	return toStatus(s.engine.PutInstanceMeta(kind, inst, id, b))
}

func (s *Server) getView(kind, coll, name string, into sqlView) error {
	inst, id, err := splitChild(name, coll)
	if err != nil {
		return toStatus(err)
	}
	ok, err := s.loadView(kind, inst, id, into)
	if err != nil {
		return toStatus(err)
	}
	if !ok {
		return status.Errorf(codes.NotFound, "ebbtable: view %s not found", name)
	}
	return nil
}

func (s *Server) deleteView(kind, coll, name, etag string, v sqlView) error {
	s.inst.mu.Lock()
	defer s.inst.mu.Unlock()
	if err := s.getView(kind, coll, name, v); err != nil {
		return err
	}
	if v.GetDeletionProtection() {
		return status.Errorf(codes.FailedPrecondition, "ebbtable: view %s is protected against deletion; turn deletion_protection off first", name)
	}
	if etag != "" && etag != viewEtag(v) {
		return status.Errorf(codes.Aborted, "ebbtable: view %s changed (etag %s)", name, etag)
	}
	inst, id, _ := splitChild(name, coll)
	return toStatus(s.engine.DeleteInstanceMeta(kind, inst, id))
}

func viewEtag(v sqlView) string {
	switch x := v.(type) {
	case *adminpb.LogicalView:
		return x.GetEtag()
	case *adminpb.MaterializedView:
		return x.GetEtag()
	}
	return ""
}

// updateView applies the paths of mask (empty: query and
// deletion_protection) from in to the stored view.
func (s *Server) updateView(kind, coll string, in sqlView, paths []string, cur sqlView, setQuery func(string), setProt func(bool)) error {
	if in == nil {
		return status.Error(codes.InvalidArgument, "ebbtable: the view is missing")
	}
	s.inst.mu.Lock()
	defer s.inst.mu.Unlock()
	if err := s.getView(kind, coll, in.GetName(), cur); err != nil {
		return err
	}
	if len(paths) == 0 {
		paths = []string{"query", "deletion_protection"}
	}
	inst, id, _ := splitChild(in.GetName(), coll)
	for _, p := range paths {
		switch p {
		case "query":
			if kind == kindMaterializedView {
				// It cannot change, so it is not checked again (a view
				// made before a rule keeps working).
				if in.GetQuery() != cur.GetQuery() {
					return status.Error(codes.InvalidArgument, "ebbtable: a materialized view's query cannot be changed")
				}
				continue
			}
			if err := s.checkViewQuery(kind, inst, in.GetQuery()); err != nil {
				return err
			}
			setQuery(in.GetQuery())
		case "deletion_protection":
			setProt(in.GetDeletionProtection())
		default:
			return status.Errorf(codes.InvalidArgument, "ebbtable: cannot update %q of a view", p)
		}
	}
	return s.putView(kind, inst, coll, id, cur)
}

// ---- logical views ----

func (a *instanceServer) CreateLogicalView(ctx context.Context, req *adminpb.CreateLogicalViewRequest) (*longrunningpb.Operation, error) {
	if r, ok, err := a.s.proposeView(ctx, "CreateLogicalView", "logicalViews", req.GetParent()+"/logicalViews/"+req.GetLogicalViewId(), req); ok {
		return viewOp(r, err) // clusterviews.go
	}
	lv := proto.Clone(req.GetLogicalView()).(*adminpb.LogicalView)
	return a.s.createView(kindLogicalView, "logicalViews", req.GetParent(), req.GetLogicalViewId(), lv, func(now *timestamppb.Timestamp) proto.Message {
		return &adminpb.CreateLogicalViewMetadata{OriginalRequest: req, StartTime: now, EndTime: now}
	})
}

func (a *instanceServer) GetLogicalView(ctx context.Context, req *adminpb.GetLogicalViewRequest) (*adminpb.LogicalView, error) {
	lv := &adminpb.LogicalView{}
	if err := a.s.getView(kindLogicalView, "logicalViews", req.GetName(), lv); err != nil {
		return nil, err
	}
	return lv, nil
}

func (a *instanceServer) ListLogicalViews(ctx context.Context, req *adminpb.ListLogicalViewsRequest) (*adminpb.ListLogicalViewsResponse, error) {
	inst, err := parseInstance(req.GetParent())
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &adminpb.ListLogicalViewsResponse{}
	err = a.s.listViews(kindLogicalView, inst, func(v []byte) error {
		lv := &adminpb.LogicalView{}
		if err := protojson.Unmarshal(v, lv); err != nil {
			return err
		}
		resp.LogicalViews = append(resp.LogicalViews, lv)
		return nil
	})
	return resp, toStatus(err)
}

func (a *instanceServer) UpdateLogicalView(ctx context.Context, req *adminpb.UpdateLogicalViewRequest) (*longrunningpb.Operation, error) {
	if r, ok, err := a.s.proposeView(ctx, "UpdateLogicalView", "logicalViews", req.GetLogicalView().GetName(), req); ok {
		return viewOp(r, err)
	}
	cur := &adminpb.LogicalView{}
	err := a.s.updateView(kindLogicalView, "logicalViews", req.GetLogicalView(), req.GetUpdateMask().GetPaths(), cur,
		func(q string) { cur.Query = q }, func(p bool) { cur.DeletionProtection = p })
	if err != nil {
		return nil, err
	}
	now := timestamppb.New(a.s.opts.Clock.Now())
	return a.s.ops.done(cur.Name, cur, &adminpb.UpdateLogicalViewMetadata{OriginalRequest: req, StartTime: now, EndTime: now})
}

func (a *instanceServer) DeleteLogicalView(ctx context.Context, req *adminpb.DeleteLogicalViewRequest) (*emptypb.Empty, error) {
	if r, ok, err := a.s.proposeView(ctx, "DeleteLogicalView", "logicalViews", req.GetName(), req); ok {
		return viewEmpty(r, err)
	}
	if err := a.s.deleteView(kindLogicalView, "logicalViews", req.GetName(), req.GetEtag(), &adminpb.LogicalView{}); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

// ---- materialized views ----

func (a *instanceServer) CreateMaterializedView(ctx context.Context, req *adminpb.CreateMaterializedViewRequest) (*longrunningpb.Operation, error) {
	if r, ok, err := a.s.proposeView(ctx, "CreateMaterializedView", "materializedViews", req.GetParent()+"/materializedViews/"+req.GetMaterializedViewId(), req); ok {
		return viewOp(r, err)
	}
	mv := proto.Clone(req.GetMaterializedView()).(*adminpb.MaterializedView)
	return a.s.createView(kindMaterializedView, "materializedViews", req.GetParent(), req.GetMaterializedViewId(), mv, func(now *timestamppb.Timestamp) proto.Message {
		return &adminpb.CreateMaterializedViewMetadata{OriginalRequest: req, StartTime: now, EndTime: now}
	})
}

func (a *instanceServer) GetMaterializedView(ctx context.Context, req *adminpb.GetMaterializedViewRequest) (*adminpb.MaterializedView, error) {
	mv := &adminpb.MaterializedView{}
	if err := a.s.getView(kindMaterializedView, "materializedViews", req.GetName(), mv); err != nil {
		return nil, err
	}
	return mv, nil
}

func (a *instanceServer) ListMaterializedViews(ctx context.Context, req *adminpb.ListMaterializedViewsRequest) (*adminpb.ListMaterializedViewsResponse, error) {
	inst, err := parseInstance(req.GetParent())
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &adminpb.ListMaterializedViewsResponse{}
	err = a.s.listViews(kindMaterializedView, inst, func(v []byte) error {
		mv := &adminpb.MaterializedView{}
		if err := protojson.Unmarshal(v, mv); err != nil {
			return err
		}
		resp.MaterializedViews = append(resp.MaterializedViews, mv)
		return nil
	})
	return resp, toStatus(err)
}

func (a *instanceServer) UpdateMaterializedView(ctx context.Context, req *adminpb.UpdateMaterializedViewRequest) (*longrunningpb.Operation, error) {
	if r, ok, err := a.s.proposeView(ctx, "UpdateMaterializedView", "materializedViews", req.GetMaterializedView().GetName(), req); ok {
		return viewOp(r, err)
	}
	cur := &adminpb.MaterializedView{}
	err := a.s.updateView(kindMaterializedView, "materializedViews", req.GetMaterializedView(), req.GetUpdateMask().GetPaths(), cur,
		func(q string) { cur.Query = q }, func(p bool) { cur.DeletionProtection = p })
	if err != nil {
		return nil, err
	}
	now := timestamppb.New(a.s.opts.Clock.Now())
	return a.s.ops.done(cur.Name, cur, &adminpb.UpdateMaterializedViewMetadata{OriginalRequest: req, StartTime: now, EndTime: now})
}

func (a *instanceServer) DeleteMaterializedView(ctx context.Context, req *adminpb.DeleteMaterializedViewRequest) (*emptypb.Empty, error) {
	if r, ok, err := a.s.proposeView(ctx, "DeleteMaterializedView", "materializedViews", req.GetName(), req); ok {
		return viewEmpty(r, err)
	}
	if err := a.s.deleteView(kindMaterializedView, "materializedViews", req.GetName(), req.GetEtag(), &adminpb.MaterializedView{}); err != nil {
		return nil, err
	}
	if inst, id, err := splitChild(req.GetName(), "materializedViews"); err == nil {
		if err := a.s.dropView(inst, id); err != nil {
			return nil, toStatus(err)
		}
	}
	return &emptypb.Empty{}, nil
}

// ---- reading a materialized view with the data API ----

// materializedRows computes a materialized view and turns its rows into
// Bigtable rows: the row key is the _key column; every other column
// "family.qualifier" (or "qualifier", family "default") is a cell at
// timestamp 0, and each row has an empty "default:" cell, as Cloud
// Bigtable presents them.
func (s *Server) materializedRows(ctx context.Context, name string, rr *table.ReadRequest, fn func(cell.Row) error) error {
	inst, id, err := splitChild(name, "materializedViews")
	if err != nil {
		return toStatus(err)
	}
	mv := &adminpb.MaterializedView{}
	if ok, err := s.loadView(kindMaterializedView, inst, id, mv); err != nil {
		return toStatus(err)
	} else if !ok {
		return status.Errorf(codes.NotFound, "ebbtable: materialized view %s not found", name)
	}
	cat := s.tableCatalog(inst)
	s.clusterSQL(&cat) // computed on read: every tablet of the table (clustersql.go)
	plan, err := sqlquery.Prepare(cat, mv.GetQuery(), nil)
	if err != nil {
		return status.Errorf(codes.FailedPrecondition, "ebbtable: materialized view %s no longer plans: %v", name, err)
	}
	// The row key is the view's key columns, encoded (mviewkey.go).
	key, ok := materializedKey(plan, mv.GetQuery())
	if !ok {
		return status.Errorf(codes.FailedPrecondition, "ebbtable: materialized view %s has no row key columns to read rows by", name)
	}
	inKey := make([]bool, len(plan.Columns))
	for _, i := range key.cols {
		inKey[i] = true
	}
	var rows []cell.Row
	var keys [][]byte
	var ranges []table.RowRange
	if rr != nil && key.direct {
		// Otherwise the row set is applied to the encoded keys, after
		// (readMaterializedView).
		keys, ranges = rr.Keys, rr.Ranges
	}
	emit := func(vals []sqlquery.Value) error {
		k := key.encode(vals)
		if k == nil {
			return nil
		}
		r := cell.Row{Key: k, Cells: []cell.Cell{{Family: "default", Qualifier: []byte{}, Value: []byte{}}}}
		for i, c := range plan.Columns {
			if inKey[i] || vals[i] == nil {
				continue
			}
			fam, q := "default", c.Name
			if j := strings.IndexByte(c.Name, '.'); j > 0 {
				fam, q = c.Name[:j], c.Name[j+1:]
			}
			r.Cells = append(r.Cells, cell.Cell{Family: fam, Qualifier: []byte(q), Value: cellBytes(vals[i])})
		}
		slices.SortStableFunc(r.Cells, func(a, b cell.Cell) int {
			if c := strings.Compare(a.Family, b.Family); c != 0 {
				return c
			}
			return strings.Compare(string(a.Qualifier), string(b.Qualifier))
		})
		rows = append(rows, r)
		return nil
	}
	// A maintained view (mviewmaint.go) catches up and serves its stored
	// rows (those of the keys and ranges asked for); otherwise the query runs now,
	// and a view whose _key is the table's row key, asked for some rows,
	// reads just those rows.
	maintained, err := s.scanKept(ctx, inst, id, readSpans(keys, ranges), nil, func(_ []byte, row []sqlquery.Value) error { return emit(row) })
	if err == nil && !maintained {
		err = plan.RunKeys(ctx, countingCatalog{cat, &s.mviews.baseRows}, nil, s.opts.Clock.Now(), keys, ranges, emit)
	}
	if err != nil {
		return sqlStatus(err)
	}
	slices.SortStableFunc(rows, func(a, b cell.Row) int { return strings.Compare(string(a.Key), string(b.Key)) })
	for _, r := range rows {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// cellBytes encodes a value as a cell: integers and floats big-endian.
func cellBytes(v sqlquery.Value) []byte {
	switch x := v.(type) {
	case []byte:
		return x
	case string:
		return []byte(x)
	case int64:
		return binary.BigEndian.AppendUint64(nil, uint64(x))
	case float64:
		return binary.BigEndian.AppendUint64(nil, math.Float64bits(x))
	case float32:
		return binary.BigEndian.AppendUint32(nil, math.Float32bits(x))
	case bool:
		if x {
			return []byte{1}
		}
		return []byte{0}
	case time.Time:
		return binary.BigEndian.AppendUint64(nil, uint64(x.UnixMicro()))
	}
	return []byte(sqlquery.Format(v))
}

// readMaterializedView serves ReadRows on a materialized view.
func (d *dataServer) readMaterializedView(req *btpb.ReadRowsRequest, stream btpb.Bigtable_ReadRowsServer) error {
	if req.GetTableName() != "" || req.GetAuthorizedViewName() != "" {
		return status.Error(codes.InvalidArgument, "ebbtable: name a table, an authorized view or a materialized view, not several")
	}
	if req.GetRowsLimit() < 0 {
		return status.Error(codes.InvalidArgument, "ebbtable: rows_limit must not be negative")
	}
	var rr table.ReadRequest
	if err := rowSetToRequest(req.GetRows(), &rr); err != nil {
		return toStatus(err)
	}
	f, err := d.compileFilter(req.GetFilter())
	if err != nil {
		return toStatus(err)
	}
	in := func(k []byte) bool {
		if len(rr.Keys) == 0 && len(rr.Ranges) == 0 {
			rs := req.GetRows()
			return rs == nil || len(rs.RowRanges) == 0
		}
		for _, x := range rr.Keys {
			if string(x) == string(k) {
				return true
			}
		}
		for _, g := range rr.Ranges {
			lo := g.Start == nil || (g.StartOpen && string(k) > string(g.Start)) || (!g.StartOpen && string(k) >= string(g.Start))
			hi := g.End == nil || (g.EndClosed && string(k) <= string(g.End)) || (!g.EndClosed && string(k) < string(g.End))
			if lo && hi {
				return true
			}
		}
		return false
	}
	w := chunkWriter{stream: stream}
	var n int64
	var sel []cell.Row
	err = d.s.materializedRows(stream.Context(), req.GetMaterializedViewName(), &rr, func(r cell.Row) error {
		if !in(r.Key) {
			return nil
		}
		if f != nil {
			if r = f.Apply(r); len(r.Cells) == 0 {
				return nil
			}
		}
		sel = append(sel, r)
		return nil
	})
	if err != nil {
		return err
	}
	if req.GetReversed() {
		slices.Reverse(sel)
	}
	for _, r := range sel {
		if lim := req.GetRowsLimit(); lim > 0 && n >= lim {
			break
		}
		if err := w.row(r); err != nil {
			return err
		}
		n++
	}
	return w.flush()
}

// sampleMaterializedView serves SampleRowKeys on a materialized view: one
// sample, the end of the view.
func (d *dataServer) sampleMaterializedView(req *btpb.SampleRowKeysRequest, stream btpb.Bigtable_SampleRowKeysServer) error {
	var size int64
	err := d.s.materializedRows(stream.Context(), req.GetMaterializedViewName(), nil, func(r cell.Row) error {
		size += int64(len(r.Key))
		for _, c := range r.Cells {
			size += int64(len(c.Qualifier) + len(c.Value))
		}
		return nil
	})
	if err != nil {
		return err
	}
	return stream.Send(&btpb.SampleRowKeysResponse{RowKey: []byte{}, OffsetBytes: size})
}

// viewKeyColumn is the index of a materialized view's _key column, BYTES
// or STRING (as Cloud Bigtable's `'*' AS _key`); -1 when there is none.
func viewKeyColumn(cols []sqlquery.Column) int {
	for i, c := range cols {
		if c.Name == "_key" && (c.Type.Kind == sqlquery.KindBytes || c.Type.Kind == sqlquery.KindString) {
			return i
		}
	}
	return -1
}

// viewKey is a view row's key: its _key value's bytes (a STRING's UTF-8);
// nil for NULL.
func viewKey(v sqlquery.Value) []byte {
	switch k := v.(type) {
	case []byte:
		return k
	case string:
		return []byte(k)
	}
	return nil
}
