package convert

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/filter"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

func pbfChain(fs ...*btpb.RowFilter) *btpb.RowFilter {
	return &btpb.RowFilter{Filter: &btpb.RowFilter_Chain_{Chain: &btpb.RowFilter_Chain{Filters: fs}}}
}

func pbfInterleave(fs ...*btpb.RowFilter) *btpb.RowFilter {
	return &btpb.RowFilter{Filter: &btpb.RowFilter_Interleave_{Interleave: &btpb.RowFilter_Interleave{Filters: fs}}}
}

func pbfCondition(pred, t, f *btpb.RowFilter) *btpb.RowFilter {
	return &btpb.RowFilter{Filter: &btpb.RowFilter_Condition_{Condition: &btpb.RowFilter_Condition{
		PredicateFilter: pred, TrueFilter: t, FalseFilter: f,
	}}}
}

func pbfFamily(re string) *btpb.RowFilter {
	return &btpb.RowFilter{Filter: &btpb.RowFilter_FamilyNameRegexFilter{FamilyNameRegexFilter: re}}
}

func pbfColumnLimit(n int32) *btpb.RowFilter {
	return &btpb.RowFilter{Filter: &btpb.RowFilter_CellsPerColumnLimitFilter{CellsPerColumnLimitFilter: n}}
}

func pbfLabel(l string) *btpb.RowFilter {
	return &btpb.RowFilter{Filter: &btpb.RowFilter_ApplyLabelTransformer{ApplyLabelTransformer: l}}
}

var (
	pbfSink  = &btpb.RowFilter{Filter: &btpb.RowFilter_Sink{Sink: true}}
	pbfPass  = &btpb.RowFilter{Filter: &btpb.RowFilter_PassAllFilter{PassAllFilter: true}}
	pbfBlock = &btpb.RowFilter{Filter: &btpb.RowFilter_BlockAllFilter{BlockAllFilter: true}}
	pbfStrip = &btpb.RowFilter{Filter: &btpb.RowFilter_StripValueTransformer{StripValueTransformer: true}}
)

// filterSamples holds one valid RowFilter per case of the RowFilter oneof,
// keyed by the oneof field's name.
var filterSamples = map[protoreflect.Name]*btpb.RowFilter{
	"chain":            pbfChain(pbfPass, pbfBlock),
	"interleave":       pbfInterleave(pbfPass, pbfBlock),
	"condition":        pbfCondition(pbfPass, pbfPass, nil),
	"sink":             pbfSink,
	"pass_all_filter":  pbfPass,
	"block_all_filter": pbfBlock,
	"row_key_regex_filter": {Filter: &btpb.RowFilter_RowKeyRegexFilter{
		RowKeyRegexFilter: []byte("r.*")}},
	"row_sample_filter":        {Filter: &btpb.RowFilter_RowSampleFilter{RowSampleFilter: 0.25}},
	"family_name_regex_filter": pbfFamily("f"),
	"column_qualifier_regex_filter": {Filter: &btpb.RowFilter_ColumnQualifierRegexFilter{
		ColumnQualifierRegexFilter: []byte("q")}},
	"column_range_filter": {Filter: &btpb.RowFilter_ColumnRangeFilter{ColumnRangeFilter: &btpb.ColumnRange{
		FamilyName: "f"}}},
	"timestamp_range_filter": {Filter: &btpb.RowFilter_TimestampRangeFilter{TimestampRangeFilter: &btpb.TimestampRange{
		StartTimestampMicros: 1000}}},
	"value_regex_filter": {Filter: &btpb.RowFilter_ValueRegexFilter{ValueRegexFilter: []byte("v")}},
	"value_range_filter": {Filter: &btpb.RowFilter_ValueRangeFilter{ValueRangeFilter: &btpb.ValueRange{}}},
	"cells_per_row_offset_filter": {Filter: &btpb.RowFilter_CellsPerRowOffsetFilter{
		CellsPerRowOffsetFilter: 1}},
	"cells_per_row_limit_filter": {Filter: &btpb.RowFilter_CellsPerRowLimitFilter{
		CellsPerRowLimitFilter: 1}},
	"cells_per_column_limit_filter": pbfColumnLimit(1),
	"strip_value_transformer":       pbfStrip,
	"apply_label_transformer":       pbfLabel("l"),
	"value_bitmask_filter": {Filter: &btpb.RowFilter_ValueBitmaskFilter{ValueBitmaskFilter: &btpb.ValueBitmask{
		Mask: []byte{1}}}},
}

// TestFilterFromProtoEveryKind fails when the RowFilter proto gains a kind
// FilterFromProto does not convert: every field of the "filter" oneof must
// have a sample that converts, to the filter.Kind named after that field, and
// compiles.
func TestFilterFromProtoEveryKind(t *testing.T) {
	oneof := (&btpb.RowFilter{}).ProtoReflect().Descriptor().Oneofs().ByName("filter")
	if oneof == nil {
		t.Fatal("RowFilter has no oneof named filter")
	}
	fields := oneof.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		p, ok := filterSamples[fd.Name()]
		if !ok {
			t.Errorf("RowFilter.%s: no sample; convert it in FilterFromProto and add one", fd.Name())
			continue
		}
		if set := p.ProtoReflect().WhichOneof(oneof); set == nil || set.Name() != fd.Name() {
			t.Errorf("sample for %s sets %v", fd.Name(), set)
			continue
		}
		f, err := FilterFromProto(p)
		if err != nil {
			t.Errorf("%s: %v", fd.Name(), err)
			continue
		}
		if f == nil || f.Kind.String() != string(fd.Name()) {
			t.Errorf("%s converted to %+v", fd.Name(), f)
			continue
		}
		if _, err := filter.Compile(f, filter.Options{}); err != nil {
			t.Errorf("%s: Compile: %v", fd.Name(), err)
		}
	}
	if len(filterSamples) != fields.Len() {
		t.Errorf("%d samples for %d oneof fields", len(filterSamples), fields.Len())
	}
}

func TestFilterFromProto(t *testing.T) {
	b := func(s string) []byte { return []byte(s) }
	cases := []struct {
		name string
		in   *btpb.RowFilter
		want *filter.Filter
	}{
		{"nil", nil, nil},
		{"no kind passes all", &btpb.RowFilter{}, filter.PassAll()},
		{"family", pbfFamily("f.*"), filter.FamilyNameRegex("f.*")},
		{"raw byte regexes", &btpb.RowFilter{Filter: &btpb.RowFilter_ValueRegexFilter{ValueRegexFilter: b("\xff\\C")}},
			filter.ValueRegex("\xff\\C")},
		{"row key", &btpb.RowFilter{Filter: &btpb.RowFilter_RowKeyRegexFilter{RowKeyRegexFilter: b("k\x00")}},
			filter.RowKeyRegex("k\x00")},
		{"column range open closed", &btpb.RowFilter{Filter: &btpb.RowFilter_ColumnRangeFilter{ColumnRangeFilter: &btpb.ColumnRange{
			FamilyName:     "f",
			StartQualifier: &btpb.ColumnRange_StartQualifierOpen{StartQualifierOpen: b("a")},
			EndQualifier:   &btpb.ColumnRange_EndQualifierClosed{EndQualifierClosed: b("z")},
		}}}, filter.ColumnRange("f", filter.OpenBound(b("a")), filter.ClosedBound(b("z")))},
		{"column range closed open", &btpb.RowFilter{Filter: &btpb.RowFilter_ColumnRangeFilter{ColumnRangeFilter: &btpb.ColumnRange{
			FamilyName:     "f",
			StartQualifier: &btpb.ColumnRange_StartQualifierClosed{StartQualifierClosed: b("a")},
			EndQualifier:   &btpb.ColumnRange_EndQualifierOpen{EndQualifierOpen: b("z")},
		}}}, filter.ColumnRange("f", filter.ClosedBound(b("a")), filter.OpenBound(b("z")))},
		{"column range unbounded", &btpb.RowFilter{Filter: &btpb.RowFilter_ColumnRangeFilter{ColumnRangeFilter: &btpb.ColumnRange{
			FamilyName: "f",
		}}}, filter.ColumnRange("f", filter.Bound{}, filter.Bound{})},
		{"value range closed open", &btpb.RowFilter{Filter: &btpb.RowFilter_ValueRangeFilter{ValueRangeFilter: &btpb.ValueRange{
			StartValue: &btpb.ValueRange_StartValueClosed{StartValueClosed: b("a")},
			EndValue:   &btpb.ValueRange_EndValueOpen{EndValueOpen: b("b")},
		}}}, filter.ValueRange(filter.ClosedBound(b("a")), filter.OpenBound(b("b")))},
		{"value range open closed", &btpb.RowFilter{Filter: &btpb.RowFilter_ValueRangeFilter{ValueRangeFilter: &btpb.ValueRange{
			StartValue: &btpb.ValueRange_StartValueOpen{StartValueOpen: b("a")},
			EndValue:   &btpb.ValueRange_EndValueClosed{EndValueClosed: b("b")},
		}}}, filter.ValueRange(filter.OpenBound(b("a")), filter.ClosedBound(b("b")))},
		{"timestamp range", &btpb.RowFilter{Filter: &btpb.RowFilter_TimestampRangeFilter{TimestampRangeFilter: &btpb.TimestampRange{
			StartTimestampMicros: 1000, EndTimestampMicros: 5000,
		}}}, filter.TimestampRange(1000, 5000)},
		{"nil timestamp range is all time", &btpb.RowFilter{Filter: &btpb.RowFilter_TimestampRangeFilter{}},
			filter.TimestampRange(0, 0)},
		{"limits", pbfChain(
			&btpb.RowFilter{Filter: &btpb.RowFilter_CellsPerRowOffsetFilter{CellsPerRowOffsetFilter: 2}},
			&btpb.RowFilter{Filter: &btpb.RowFilter_CellsPerRowLimitFilter{CellsPerRowLimitFilter: 3}},
			pbfColumnLimit(4),
		), filter.Chain(filter.CellsPerRowOffset(2), filter.CellsPerRowLimit(3), filter.CellsPerColumnLimit(4))},
		{"nested", pbfChain(
			pbfFamily("a"),
			pbfInterleave(pbfPass, pbfChain(pbfLabel("foo"), pbfSink)),
			pbfCondition(pbfColumnLimit(1), pbfStrip, nil),
		), filter.Chain(
			filter.FamilyNameRegex("a"),
			filter.Interleave(filter.PassAll(), filter.Chain(filter.ApplyLabel("foo"), filter.Sink())),
			filter.Condition(filter.CellsPerColumnLimit(1), filter.StripValue(), nil),
		)},
		// An empty branch is a filter that passes all; a missing one is nil.
		{"condition with empty and missing branches", pbfCondition(nil, &btpb.RowFilter{}, nil),
			filter.Condition(nil, filter.PassAll(), nil)},
		{"sample", &btpb.RowFilter{Filter: &btpb.RowFilter_RowSampleFilter{RowSampleFilter: 0.125}}, filter.RowSample(0.125)},
		{"bitmask", &btpb.RowFilter{Filter: &btpb.RowFilter_ValueBitmaskFilter{ValueBitmaskFilter: &btpb.ValueBitmask{Mask: b("\x0f")}}},
			filter.ValueBitmask(b("\x0f"))},
		// Values Compile rejects still convert.
		{"empty chain", pbfChain(), filter.Chain()},
		{"bad regex", pbfFamily("["), filter.FamilyNameRegex("[")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := FilterFromProto(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got  %s\nwant %s", dumpFilter(got), dumpFilter(c.want))
			}
		})
	}
}

func TestFilterFromProtoErrors(t *testing.T) {
	unknown := &btpb.RowFilter{}
	unknown.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	huge := pbfChain()
	for proto.Size(huge) <= MaxFilterBytes {
		huge.GetChain().Filters = append(huge.GetChain().Filters, pbfFamily(strings.Repeat("f", 100)))
	}
	cases := []struct {
		name string
		in   *btpb.RowFilter
		want string
	}{
		{"unknown kind", unknown, "kind unknown to this server"},
		{"unknown kind nested", pbfCondition(nil, pbfInterleave(pbfPass, unknown), nil), "kind unknown to this server"},
		{"sink false", &btpb.RowFilter{Filter: &btpb.RowFilter_Sink{}}, "sink must be true if set"},
		{"pass all false", &btpb.RowFilter{Filter: &btpb.RowFilter_PassAllFilter{}}, "pass_all_filter must be true if set"},
		{"block all false", pbfChain(pbfPass, &btpb.RowFilter{Filter: &btpb.RowFilter_BlockAllFilter{}}), "block_all_filter must be true if set"},
		{"strip false", pbfCondition(pbfPass, &btpb.RowFilter{Filter: &btpb.RowFilter_StripValueTransformer{}}, nil), "strip_value_transformer must be true if set"},
		{"too large", huge, "bytes, more than 20480"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := FilterFromProto(c.in)
			if err == nil {
				t.Fatalf("got %s, want error %q", dumpFilter(got), c.want)
			}
			if !errors.Is(err, filter.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want one wrapping filter.ErrInvalid and containing %q", err, c.want)
			}
		})
	}
}

// TestFilterFromProtoEndToEnd converts, compiles and applies the RowFilter
// sink example.
func TestFilterFromProtoEndToEnd(t *testing.T) {
	f, err := FilterFromProto(pbfChain(
		pbfFamily("a"),
		pbfInterleave(pbfPass, pbfChain(pbfLabel("foo"), pbfSink)),
		&btpb.RowFilter{Filter: &btpb.RowFilter_ColumnQualifierRegexFilter{ColumnQualifierRegexFilter: []byte("b")}},
	))
	if err != nil {
		t.Fatal(err)
	}
	prog, err := filter.Compile(f, filter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	row := prog.Apply(cell.Row{Key: []byte("r"), Cells: []cell.Cell{
		{Family: "a", Qualifier: []byte("a"), Timestamp: 1, Value: []byte("w")},
		{Family: "a", Qualifier: []byte("b"), Timestamp: 2, Value: []byte("x")},
		{Family: "b", Qualifier: []byte("b"), Timestamp: 4, Value: []byte("z")},
	}})
	var got []string
	for _, c := range row.Cells {
		got = append(got, c.Family+":"+string(c.Qualifier)+"="+string(c.Value)+strings.Join(c.Labels, ","))
	}
	want := []string{"a:a=wfoo", "a:b=xfoo", "a:b=x"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// dumpFilter renders a filter tree for failure messages.
func dumpFilter(f *filter.Filter) string {
	if f == nil {
		return "nil"
	}
	var sb strings.Builder
	sb.WriteString(f.Kind.String())
	sb.WriteString("{")
	var parts []string
	for _, k := range f.Filters {
		parts = append(parts, dumpFilter(k))
	}
	if f.Kind == filter.KindCondition {
		parts = append(parts, dumpFilter(f.Predicate), dumpFilter(f.True), dumpFilter(f.False))
	}
	if f.Regex != "" || f.Family != "" || f.Label != "" {
		parts = append(parts, strings.TrimSpace(f.Regex+" "+f.Family+" "+f.Label))
	}
	if f.Start.Kind != filter.Unbounded || f.End.Kind != filter.Unbounded {
		parts = append(parts, string(bytes.Join([][]byte{f.Start.Value, f.End.Value}, []byte(".."))))
	}
	sb.WriteString(strings.Join(parts, ", "))
	sb.WriteString("}")
	return sb.String()
}
