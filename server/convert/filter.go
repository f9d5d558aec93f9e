package convert

import (
	"fmt"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/filter"
	"google.golang.org/protobuf/proto"
)

// MaxFilterBytes is the largest serialized RowFilter Bigtable accepts.
const MaxFilterBytes = 20480

// FilterFromProto converts a RowFilter into the filter model, without
// validating values (filter.Compile does). A nil RowFilter converts to nil,
// which passes every cell. A RowFilter with no kind set passes every cell, as
// the proto documents, and converts to filter.PassAll(); one that carries
// unknown fields instead (a kind newer than this server) is an error. Errors
// wrap filter.ErrInvalid: a filter over MaxFilterBytes, a boolean kind
// (sink, pass_all_filter, block_all_filter, strip_value_transformer) set to
// false, an unknown kind.
func FilterFromProto(p *btpb.RowFilter) (*filter.Filter, error) {
	if p == nil {
		return nil, nil
	}
	if n := proto.Size(p); n > MaxFilterBytes {
		return nil, fmt.Errorf("%w: RowFilter is %d bytes, more than %d", filter.ErrInvalid, n, MaxFilterBytes)
	}
	return filterFromProto(p)
}

func filterFromProto(p *btpb.RowFilter) (*filter.Filter, error) {
	if p == nil {
		return nil, nil
	}
	switch x := p.Filter.(type) {
	case nil:
		if len(p.ProtoReflect().GetUnknown()) > 0 {
			return nil, fmt.Errorf("%w: RowFilter of a kind unknown to this server", filter.ErrInvalid)
		}
		return filter.PassAll(), nil
	case *btpb.RowFilter_Chain_:
		fs, err := filtersFromProto(x.Chain.GetFilters())
		if err != nil {
			return nil, err
		}
		return filter.Chain(fs...), nil
	case *btpb.RowFilter_Interleave_:
		fs, err := filtersFromProto(x.Interleave.GetFilters())
		if err != nil {
			return nil, err
		}
		return filter.Interleave(fs...), nil
	case *btpb.RowFilter_Condition_:
		c := x.Condition
		pred, err := filterFromProto(c.GetPredicateFilter())
		if err != nil {
			return nil, err
		}
		t, err := filterFromProto(c.GetTrueFilter())
		if err != nil {
			return nil, err
		}
		f, err := filterFromProto(c.GetFalseFilter())
		if err != nil {
			return nil, err
		}
		return filter.Condition(pred, t, f), nil
	case *btpb.RowFilter_Sink:
		return filterFlag(x.Sink, filter.Sink())
	case *btpb.RowFilter_PassAllFilter:
		return filterFlag(x.PassAllFilter, filter.PassAll())
	case *btpb.RowFilter_BlockAllFilter:
		return filterFlag(x.BlockAllFilter, filter.BlockAll())
	case *btpb.RowFilter_StripValueTransformer:
		return filterFlag(x.StripValueTransformer, filter.StripValue())
	case *btpb.RowFilter_RowKeyRegexFilter:
		return filter.RowKeyRegex(string(x.RowKeyRegexFilter)), nil
	case *btpb.RowFilter_RowSampleFilter:
		return filter.RowSample(x.RowSampleFilter), nil
	case *btpb.RowFilter_FamilyNameRegexFilter:
		return filter.FamilyNameRegex(x.FamilyNameRegexFilter), nil
	case *btpb.RowFilter_ColumnQualifierRegexFilter:
		return filter.ColumnQualifierRegex(string(x.ColumnQualifierRegexFilter)), nil
	case *btpb.RowFilter_ColumnRangeFilter:
		r := x.ColumnRangeFilter
		var start, end filter.Bound
		switch b := r.GetStartQualifier().(type) {
		case *btpb.ColumnRange_StartQualifierClosed:
			start = filter.ClosedBound(b.StartQualifierClosed)
		case *btpb.ColumnRange_StartQualifierOpen:
			start = filter.OpenBound(b.StartQualifierOpen)
		}
		switch b := r.GetEndQualifier().(type) {
		case *btpb.ColumnRange_EndQualifierClosed:
			end = filter.ClosedBound(b.EndQualifierClosed)
		case *btpb.ColumnRange_EndQualifierOpen:
			end = filter.OpenBound(b.EndQualifierOpen)
		}
		return filter.ColumnRange(r.GetFamilyName(), start, end), nil
	case *btpb.RowFilter_TimestampRangeFilter:
		r := x.TimestampRangeFilter
		return filter.TimestampRange(r.GetStartTimestampMicros(), r.GetEndTimestampMicros()), nil
	case *btpb.RowFilter_ValueRegexFilter:
		return filter.ValueRegex(string(x.ValueRegexFilter)), nil
	case *btpb.RowFilter_ValueRangeFilter:
		r := x.ValueRangeFilter
		var start, end filter.Bound
		switch b := r.GetStartValue().(type) {
		case *btpb.ValueRange_StartValueClosed:
			start = filter.ClosedBound(b.StartValueClosed)
		case *btpb.ValueRange_StartValueOpen:
			start = filter.OpenBound(b.StartValueOpen)
		}
		switch b := r.GetEndValue().(type) {
		case *btpb.ValueRange_EndValueClosed:
			end = filter.ClosedBound(b.EndValueClosed)
		case *btpb.ValueRange_EndValueOpen:
			end = filter.OpenBound(b.EndValueOpen)
		}
		return filter.ValueRange(start, end), nil
	case *btpb.RowFilter_CellsPerRowOffsetFilter:
		return filter.CellsPerRowOffset(int64(x.CellsPerRowOffsetFilter)), nil
	case *btpb.RowFilter_CellsPerRowLimitFilter:
		return filter.CellsPerRowLimit(int64(x.CellsPerRowLimitFilter)), nil
	case *btpb.RowFilter_CellsPerColumnLimitFilter:
		return filter.CellsPerColumnLimit(int64(x.CellsPerColumnLimitFilter)), nil
	case *btpb.RowFilter_ApplyLabelTransformer:
		return filter.ApplyLabel(x.ApplyLabelTransformer), nil
	case *btpb.RowFilter_ValueBitmaskFilter:
		return filter.ValueBitmask(x.ValueBitmaskFilter.GetMask()), nil
	default:
		return nil, fmt.Errorf("%w: unsupported RowFilter kind %T", filter.ErrInvalid, x)
	}
}

func filtersFromProto(ps []*btpb.RowFilter) ([]*filter.Filter, error) {
	var fs []*filter.Filter
	for _, p := range ps {
		f, err := filterFromProto(p)
		if err != nil {
			return nil, err
		}
		fs = append(fs, f)
	}
	return fs, nil
}

// filterFlag returns f for a boolean kind set to true; Bigtable rejects one
// set to false.
func filterFlag(set bool, f *filter.Filter) (*filter.Filter, error) {
	if !set {
		return nil, fmt.Errorf("%w: %s must be true if set", filter.ErrInvalid, f.Kind)
	}
	return f, nil
}
