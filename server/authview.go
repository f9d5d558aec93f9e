package server

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Authorized views: admin CRUD, and the data API through a view. A view is
// a subset of its table: row prefixes, and per family the qualifiers and
// qualifier prefixes it covers. Through a view, reads see only the rows
// and cells inside it; a write, a read-modify-write rule or a
// check-and-mutate outside it is refused with PermissionDenied, as Cloud
// Bigtable does. Views are stored as instance metadata (kind "authview",
// name "tables/T/authorizedViews/V", protojson of adminpb.AuthorizedView)
// and go with their table.

const kindAuthView = "authview"

// parseAuthView checks projects/P/instances/I/tables/T/authorizedViews/V.
func parseAuthView(name string) (ref tableRef, id string, err error) {
	i := strings.Index(name, "/authorizedViews/")
	if i < 0 {
		return tableRef{}, "", fmt.Errorf("%w: %q is not an authorized view name (projects/P/instances/I/tables/T/authorizedViews/V)", errInvalid, name)
	}
	ref, err = parseTable(name[:i])
	if err != nil {
		return tableRef{}, "", err
	}
	id = name[i+len("/authorizedViews/"):]
	if id == "" || strings.Contains(id, "/") {
		return tableRef{}, "", fmt.Errorf("%w: %q is not an authorized view name", errInvalid, name)
	}
	return ref, id, nil
}

func authViewKey(ref tableRef, id string) string {
	return "tables/" + ref.table + "/authorizedViews/" + id
}

// authorizedView returns the stored view named name, or NotFound.
func (s *Server) authorizedView(name string) (*adminpb.AuthorizedView, error) {
	ref, id, err := parseAuthView(name)
	if err != nil {
		return nil, err
	}
	if _, err := s.engine.Table(ref.instance, ref.table); err != nil {
		return nil, err
	}
	key := authViewKey(ref, id)
	var found *adminpb.AuthorizedView
	err = s.engine.InstanceMeta(kindAuthView, ref.instance, func(_, n string, v []byte) error {
		if n != key {
			return nil
		}
		found = &adminpb.AuthorizedView{}
		return protojson.Unmarshal(v, found)
	})
	if err != nil {
		return nil, err
	}
	if found == nil {
		return nil, status.Errorf(codes.NotFound, "ebbtable: authorized view %s not found", name)
	}
	return found, nil
}

func (s *Server) putAuthorizedView(ref tableRef, id string, v *adminpb.AuthorizedView) error {
	b, err := protojson.Marshal(v)
	if err != nil {
		return err
	}
	return s.putMeta(kindAuthView, ref.instance, authViewKey(ref, id), b) // metarepl.go
}

// forgetTableViews removes a deleted table's views and their policies.
func (s *Server) forgetTableViews(ref tableRef) error {
	prefix := "tables/" + ref.table + "/authorizedViews/"
	var names []string
	if err := s.engine.InstanceMeta(kindAuthView, ref.instance, func(_, n string, _ []byte) error {
		if strings.HasPrefix(n, prefix) {
			names = append(names, n)
		}
		return nil
	}); err != nil {
		return err
	}
	for _, n := range names {
		if err := s.deleteMeta(kindAuthView, ref.instance, n); err != nil {
			return err
		}
		if err := s.forgetIAM(ref.instance + "/" + n); err != nil {
			return err
		}
	}
	return nil
}

// checkSubsetView validates a view's definition against its table.
func checkSubsetView(m *table.Meta, v *adminpb.AuthorizedView) error {
	sv := v.GetSubsetView()
	if sv == nil {
		return status.Error(codes.InvalidArgument, "ebbtable: an authorized view needs a subset_view")
	}
	for fam := range sv.GetFamilySubsets() {
		if _, ok := m.Family(fam); !ok {
			return status.Errorf(codes.InvalidArgument, "ebbtable: authorized view names family %q, which table %s does not have", fam, m.Name)
		}
	}
	return nil
}

func (a *adminServer) CreateAuthorizedView(ctx context.Context, req *adminpb.CreateAuthorizedViewRequest) (*longrunningpb.Operation, error) {
	name := req.GetParent() + "/authorizedViews/" + req.GetAuthorizedViewId()
	ref, id, err := parseAuthView(name)
	if err != nil {
		return nil, toStatus(err)
	}
	m, err := a.s.engine.Table(ref.instance, ref.table)
	if err != nil {
		return nil, toStatus(err)
	}
	v := proto.Clone(req.GetAuthorizedView()).(*adminpb.AuthorizedView)
	if v == nil {
		v = &adminpb.AuthorizedView{}
	}
	v.Name = name
	if err := checkSubsetView(m, v); err != nil {
		return nil, err
	}
	a.s.inst.mu.Lock()
	defer a.s.inst.mu.Unlock()
	if _, err := a.s.authorizedView(name); err == nil {
		return nil, status.Errorf(codes.AlreadyExists, "ebbtable: authorized view %s already exists", name)
	}
	v.Etag = a.s.newEtag(ctx)
	if err := a.s.putAuthorizedView(ref, id, v); err != nil {
		return nil, toStatus(err)
	}
	now := timestamppb.New(a.s.opts.Clock.Now())
	return a.s.ops.done(name, v, &adminpb.CreateAuthorizedViewMetadata{OriginalRequest: req, RequestTime: now, FinishTime: now})
}

func (a *adminServer) GetAuthorizedView(ctx context.Context, req *adminpb.GetAuthorizedViewRequest) (*adminpb.AuthorizedView, error) {
	v, err := a.s.authorizedView(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	if req.GetView() == adminpb.AuthorizedView_NAME_ONLY {
		return &adminpb.AuthorizedView{Name: v.GetName()}, nil
	}
	return v, nil
}

func (a *adminServer) ListAuthorizedViews(ctx context.Context, req *adminpb.ListAuthorizedViewsRequest) (*adminpb.ListAuthorizedViewsResponse, error) {
	ref, err := parseTable(req.GetParent())
	if err != nil {
		return nil, toStatus(err)
	}
	if _, err := a.s.engine.Table(ref.instance, ref.table); err != nil {
		return nil, toStatus(err)
	}
	prefix := "tables/" + ref.table + "/authorizedViews/"
	resp := &adminpb.ListAuthorizedViewsResponse{}
	err = a.s.engine.InstanceMeta(kindAuthView, ref.instance, func(_, n string, b []byte) error {
		if !strings.HasPrefix(n, prefix) {
			return nil
		}
		v := &adminpb.AuthorizedView{}
		if err := protojson.Unmarshal(b, v); err != nil {
			return err
		}
		if req.GetView() == adminpb.AuthorizedView_NAME_ONLY || req.GetView() == adminpb.AuthorizedView_RESPONSE_VIEW_UNSPECIFIED {
			v = &adminpb.AuthorizedView{Name: v.GetName()}
		}
		resp.AuthorizedViews = append(resp.AuthorizedViews, v)
		return nil
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return resp, nil
}

// UpdateAuthorizedView changes subset_view and deletion_protection (all
// of them when the mask is empty). A view carrying an etag must carry the
// stored one.
func (a *adminServer) UpdateAuthorizedView(ctx context.Context, req *adminpb.UpdateAuthorizedViewRequest) (*longrunningpb.Operation, error) {
	in := req.GetAuthorizedView()
	ref, id, err := parseAuthView(in.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	a.s.inst.mu.Lock()
	defer a.s.inst.mu.Unlock()
	v, err := a.s.authorizedView(in.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	if in.GetEtag() != "" && in.GetEtag() != v.GetEtag() {
		return nil, status.Errorf(codes.Aborted, "ebbtable: authorized view %s changed since it was read (etag mismatch)", in.GetName())
	}
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		paths = []string{"subset_view", "deletion_protection"}
	}
	for _, p := range paths {
		switch p {
		case "subset_view":
			if in.GetSubsetView() != nil || len(req.GetUpdateMask().GetPaths()) > 0 {
				v.AuthorizedView = in.GetAuthorizedView()
			}
		case "deletion_protection":
			v.DeletionProtection = in.GetDeletionProtection()
		default:
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: cannot update authorized view field %q", p)
		}
	}
	m, err := a.s.engine.Table(ref.instance, ref.table)
	if err != nil {
		return nil, toStatus(err)
	}
	if err := checkSubsetView(m, v); err != nil {
		return nil, err
	}
	v.Etag = a.s.newEtag(ctx)
	if err := a.s.putAuthorizedView(ref, id, v); err != nil {
		return nil, toStatus(err)
	}
	now := timestamppb.New(a.s.opts.Clock.Now())
	return a.s.ops.done(v.Name, v, &adminpb.UpdateAuthorizedViewMetadata{OriginalRequest: req, RequestTime: now, FinishTime: now})
}

func (a *adminServer) DeleteAuthorizedView(ctx context.Context, req *adminpb.DeleteAuthorizedViewRequest) (*emptypb.Empty, error) {
	ref, id, err := parseAuthView(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	a.s.inst.mu.Lock()
	defer a.s.inst.mu.Unlock()
	v, err := a.s.authorizedView(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	if req.GetEtag() != "" && req.GetEtag() != v.GetEtag() {
		return nil, status.Errorf(codes.Aborted, "ebbtable: authorized view %s changed since it was read (etag mismatch)", req.GetName())
	}
	if v.GetDeletionProtection() {
		return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: authorized view %s is protected against deletion; turn deletion_protection off first", req.GetName())
	}
	if err := a.s.deleteMeta(kindAuthView, ref.instance, authViewKey(ref, id)); err != nil {
		return nil, toStatus(err)
	}
	if err := a.s.forgetIAM(req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	return &emptypb.Empty{}, nil
}

// ---- the data API through a view ----

// view is a resolved authorized view for the data path.
type view struct {
	name     string
	prefixes [][]byte
	fams     map[string]*adminpb.AuthorizedView_FamilySubsets
}

// dataTable resolves a data request's table, through its authorized view
// when it names one (then v is not nil).
func (d *dataServer) dataTable(tableName, viewName string) (tableRef, *view, error) {
	if viewName == "" {
		ref, err := tableOf(tableName, "")
		return ref, nil, err
	}
	if tableName != "" {
		return tableRef{}, nil, status.Error(codes.InvalidArgument, "ebbtable: a request names a table or an authorized view, not both")
	}
	ref, _, err := parseAuthView(viewName)
	if err != nil {
		return tableRef{}, nil, err
	}
	av, err := d.s.authorizedView(viewName)
	if err != nil {
		return tableRef{}, nil, err
	}
	sv := av.GetSubsetView()
	return ref, &view{name: viewName, prefixes: sv.GetRowPrefixes(), fams: sv.GetFamilySubsets()}, nil
}

func (v *view) rowIn(key []byte) bool {
	for _, p := range v.prefixes {
		if bytes.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

func (v *view) cellIn(fam string, qual []byte) bool {
	fs := v.fams[fam]
	if fs == nil {
		return false
	}
	for _, q := range fs.GetQualifiers() {
		if bytes.Equal(q, qual) {
			return true
		}
	}
	for _, p := range fs.GetQualifierPrefixes() {
		if bytes.HasPrefix(qual, p) {
			return true
		}
	}
	return false
}

func (v *view) familyIn(fam string) bool {
	for _, p := range v.fams[fam].GetQualifierPrefixes() {
		if len(p) == 0 {
			return true
		}
	}
	return false
}

func (v *view) denied(format string, args ...any) error {
	return status.Errorf(codes.PermissionDenied, "ebbtable: "+format+", outside authorized view "+v.name, args...)
}

// checkRow refuses a row key outside the view.
func (v *view) checkRow(key []byte) error {
	if v == nil || v.rowIn(key) {
		return nil
	}
	return v.denied("row %q is", key)
}

// checkMutations refuses mutations that touch cells outside the view. A
// DeleteFromFamily needs the whole family in the view (a qualifier prefix
// ""); a DeleteFromRow is refused, since it would delete cells the view
// does not cover.
func (v *view) checkMutations(key []byte, ms []*btpb.Mutation) error {
	if v == nil {
		return nil
	}
	if err := v.checkRow(key); err != nil {
		return err
	}
	for _, m := range ms {
		var fam string
		var qual []byte
		switch x := m.GetMutation().(type) {
		case *btpb.Mutation_SetCell_:
			fam, qual = x.SetCell.GetFamilyName(), x.SetCell.GetColumnQualifier()
		case *btpb.Mutation_DeleteFromColumn_:
			fam, qual = x.DeleteFromColumn.GetFamilyName(), x.DeleteFromColumn.GetColumnQualifier()
		case *btpb.Mutation_AddToCell_:
			fam, qual = x.AddToCell.GetFamilyName(), x.AddToCell.GetColumnQualifier().GetRawValue()
		case *btpb.Mutation_MergeToCell_:
			fam, qual = x.MergeToCell.GetFamilyName(), x.MergeToCell.GetColumnQualifier().GetRawValue()
		case *btpb.Mutation_DeleteFromFamily_:
			if !v.familyIn(x.DeleteFromFamily.GetFamilyName()) {
				return v.denied("deleting family %q reaches cells", x.DeleteFromFamily.GetFamilyName())
			}
			continue
		case *btpb.Mutation_DeleteFromRow_:
			return v.denied("DeleteFromRow reaches cells")
		default:
			continue
		}
		if !v.cellIn(fam, qual) {
			return v.denied("column %s:%q is", fam, qual)
		}
	}
	return nil
}

// checkRules refuses read-modify-write rules outside the view.
func (v *view) checkRules(key []byte, rules []*btpb.ReadModifyWriteRule) error {
	if v == nil {
		return nil
	}
	if err := v.checkRow(key); err != nil {
		return err
	}
	for _, r := range rules {
		if !v.cellIn(r.GetFamilyName(), r.GetColumnQualifier()) {
			return v.denied("column %s:%q is", r.GetFamilyName(), r.GetColumnQualifier())
		}
	}
	return nil
}

// filter returns f restricted to the view's cells: the view's columns as
// disjoint column ranges, interleaved, then f.
func (v *view) filter(f *btpb.RowFilter) *btpb.RowFilter {
	if v == nil {
		return f
	}
	var parts []*btpb.RowFilter
	fams := make([]string, 0, len(v.fams))
	for fam := range v.fams {
		fams = append(fams, fam)
	}
	sort.Strings(fams)
	for _, fam := range fams {
		for _, r := range columnRanges(v.fams[fam]) {
			cr := &btpb.ColumnRange{FamilyName: fam, StartQualifier: &btpb.ColumnRange_StartQualifierClosed{StartQualifierClosed: r[0]}}
			if r[1] != nil {
				cr.EndQualifier = &btpb.ColumnRange_EndQualifierOpen{EndQualifierOpen: r[1]}
			}
			parts = append(parts, &btpb.RowFilter{Filter: &btpb.RowFilter_ColumnRangeFilter{ColumnRangeFilter: cr}})
		}
	}
	var vf *btpb.RowFilter
	switch len(parts) {
	case 0:
		vf = &btpb.RowFilter{Filter: &btpb.RowFilter_BlockAllFilter{BlockAllFilter: true}}
	case 1:
		vf = parts[0]
	default:
		vf = &btpb.RowFilter{Filter: &btpb.RowFilter_Interleave_{Interleave: &btpb.RowFilter_Interleave{Filters: parts}}}
	}
	if f == nil {
		return vf
	}
	return &btpb.RowFilter{Filter: &btpb.RowFilter_Chain_{Chain: &btpb.RowFilter_Chain{Filters: []*btpb.RowFilter{vf, f}}}}
}

// columnRanges turns a family subset into sorted disjoint qualifier ranges
// [start, end) (end nil: unbounded), so an interleave of them returns each
// cell once.
func columnRanges(fs *adminpb.AuthorizedView_FamilySubsets) [][2][]byte {
	var rs [][2][]byte
	for _, q := range fs.GetQualifiers() {
		rs = append(rs, [2][]byte{q, append(append([]byte{}, q...), 0)})
	}
	for _, p := range fs.GetQualifierPrefixes() {
		rs = append(rs, [2][]byte{p, prefixEnd(p)})
	}
	sort.Slice(rs, func(i, j int) bool { return bytes.Compare(rs[i][0], rs[j][0]) < 0 })
	var out [][2][]byte
	for _, r := range rs {
		if n := len(out); n > 0 && (out[n-1][1] == nil || bytes.Compare(r[0], out[n-1][1]) <= 0) {
			if out[n-1][1] != nil && (r[1] == nil || bytes.Compare(r[1], out[n-1][1]) > 0) {
				out[n-1][1] = r[1]
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

// prefixEnd is the first key after every key with prefix p (nil: none).
func prefixEnd(p []byte) []byte {
	e := append([]byte{}, p...)
	for i := len(e) - 1; i >= 0; i-- {
		if e[i] < 0xff {
			e[i]++
			return e[:i+1]
		}
	}
	return nil
}

// restrictRows limits a read request to the view's rows: keys outside it
// are dropped, and ranges are intersected with its prefixes.
func (v *view) restrictRows(rr *table.ReadRequest) {
	if v == nil {
		return
	}
	var pr []table.RowRange
	for _, p := range v.prefixes {
		pr = append(pr, table.RowRange{Start: append([]byte{}, p...), End: prefixEnd(p)})
	}
	if len(rr.Keys) == 0 && len(rr.Ranges) == 0 {
		rr.Ranges = pr
		if len(pr) == 0 {
			rr.Keys = [][]byte{} // nothing: reads below see an empty set
		}
		return
	}
	var keys [][]byte
	for _, k := range rr.Keys {
		if v.rowIn(k) {
			keys = append(keys, k)
		}
	}
	var ranges []table.RowRange
	for _, r := range rr.Ranges {
		for _, p := range pr {
			if x, ok := intersect(r, p); ok {
				ranges = append(ranges, x)
			}
		}
	}
	rr.Keys, rr.Ranges = keys, ranges
}

// intersect intersects a request range with a prefix range [Start, End).
func intersect(r, p table.RowRange) (table.RowRange, bool) {
	out := r
	if c := bytes.Compare(p.Start, r.Start); c > 0 || (c == 0 && !r.StartOpen) {
		out.Start, out.StartOpen = p.Start, false
	}
	if p.End != nil {
		if r.End == nil || bytes.Compare(p.End, r.End) < 0 || (bytes.Equal(p.End, r.End) && r.EndClosed) {
			out.End, out.EndClosed = p.End, false
		}
	}
	if out.End != nil {
		c := bytes.Compare(out.Start, out.End)
		if c > 0 || (c == 0 && (out.StartOpen || !out.EndClosed)) {
			return table.RowRange{}, false
		}
	}
	return out, true
}

// restrictSamples keeps the samples inside [lo, hi) (hi nil: unbounded)
// and ends them at hi, as Bigtable samples a row range: the split points
// inside it, then its end. samples end with the table's end (key "").
func restrictSamples(samples []table.Sample, lo, hi []byte) []table.Sample {
	var out []table.Sample
	for _, s := range samples {
		last := len(s.Key) == 0
		switch {
		case !last && bytes.Compare(s.Key, lo) <= 0:
			continue
		case hi == nil && last:
			return append(out, s)
		case hi != nil && (last || bytes.Compare(s.Key, hi) >= 0):
			return append(out, table.Sample{Key: hi, Offset: s.Offset})
		}
		out = append(out, s)
	}
	return out
}

// sampleSpan is the smallest key range covering the view's rows.
func (v *view) sampleSpan() (lo, hi []byte) {
	if len(v.prefixes) == 0 {
		return nil, []byte{}
	}
	lo, hi = v.prefixes[0], prefixEnd(v.prefixes[0])
	for _, p := range v.prefixes[1:] {
		if bytes.Compare(p, lo) < 0 {
			lo = p
		}
		if e := prefixEnd(p); hi != nil && (e == nil || bytes.Compare(e, hi) > 0) {
			hi = e
		}
	}
	return lo, hi
}

// sampleWithin restricts a table's samples to the request's row_range and
// to the view's rows, when either is given.
func sampleWithin(samples []table.Sample, v *view, req *btpb.SampleRowKeysRequest) ([]table.Sample, error) {
	var lo, hi []byte
	bounded := false
	if v != nil {
		if len(v.prefixes) == 0 {
			return nil, nil
		}
		lo, hi = v.sampleSpan()
		bounded = true
	}
	if r := req.GetRowRange(); r != nil {
		var rlo, rhi []byte
		switch k := r.StartKey.(type) {
		case *btpb.RowRange_StartKeyClosed:
			rlo = k.StartKeyClosed
		case *btpb.RowRange_StartKeyOpen:
			rlo = k.StartKeyOpen
		}
		switch k := r.EndKey.(type) {
		case *btpb.RowRange_EndKeyOpen:
			if len(k.EndKeyOpen) > 0 {
				rhi = k.EndKeyOpen
			}
		case *btpb.RowRange_EndKeyClosed:
			if len(k.EndKeyClosed) > 0 {
				rhi = append(append([]byte{}, k.EndKeyClosed...), 0)
			}
		}
		if rhi != nil && bytes.Compare(rlo, rhi) > 0 {
			return nil, fmt.Errorf("%w: row_range starts after it ends", errInvalid)
		}
		if !bounded || bytes.Compare(rlo, lo) > 0 {
			lo = rlo
		}
		if !bounded || (rhi != nil && (hi == nil || bytes.Compare(rhi, hi) < 0)) {
			hi = rhi
		}
		bounded = true
	}
	if !bounded {
		return samples, nil
	}
	return restrictSamples(samples, lo, hi), nil
}
