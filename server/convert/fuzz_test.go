package convert

import (
	"encoding/json"
	"errors"
	"testing"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/filter"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

func mustMarshal(f *testing.F, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// FuzzFilterFromProto unmarshals arbitrary bytes as a RowFilter (what a
// ReadRows or CheckAndMutateRow request carries) and runs the server's
// path: FilterFromProto, filter.Compile, Apply to a row. Refusals wrap
// filter.ErrInvalid (the server answers InvalidArgument); nothing panics.
func FuzzFilterFromProto(f *testing.F) {
	seeds := []*btpb.RowFilter{
		pbfChain(pbfFamily("f.*"), pbfColumnLimit(1)),
		pbfInterleave(pbfLabel("x"), &btpb.RowFilter{Filter: &btpb.RowFilter_StripValueTransformer{StripValueTransformer: true}}),
		pbfCondition(&btpb.RowFilter{Filter: &btpb.RowFilter_ValueRegexFilter{ValueRegexFilter: []byte(`\C+`)}}, pbfColumnLimit(2), nil),
		{Filter: &btpb.RowFilter_ColumnRangeFilter{ColumnRangeFilter: &btpb.ColumnRange{FamilyName: "f",
			StartQualifier: &btpb.ColumnRange_StartQualifierOpen{StartQualifierOpen: []byte("a")},
			EndQualifier:   &btpb.ColumnRange_EndQualifierClosed{EndQualifierClosed: []byte("z")}}}},
		{Filter: &btpb.RowFilter_ValueRangeFilter{ValueRangeFilter: &btpb.ValueRange{
			StartValue: &btpb.ValueRange_StartValueClosed{StartValueClosed: []byte("b")},
			EndValue:   &btpb.ValueRange_EndValueOpen{EndValueOpen: []byte("a")}}}},
		{Filter: &btpb.RowFilter_TimestampRangeFilter{TimestampRangeFilter: &btpb.TimestampRange{StartTimestampMicros: 5000, EndTimestampMicros: 1000}}},
		{Filter: &btpb.RowFilter_RowSampleFilter{RowSampleFilter: 1.5}},
		{Filter: &btpb.RowFilter_CellsPerRowOffsetFilter{CellsPerRowOffsetFilter: -1}},
		{Filter: &btpb.RowFilter_RowKeyRegexFilter{RowKeyRegexFilter: []byte("(a")}},
		{Filter: &btpb.RowFilter_BlockAllFilter{BlockAllFilter: false}},
		{Filter: &btpb.RowFilter_ValueBitmaskFilter{ValueBitmaskFilter: &btpb.ValueBitmask{Mask: []byte{0x0f}}}},
		{},
	}
	for _, s := range seeds {
		f.Add(mustMarshal(f, s), []byte("r"), []byte("v"))
	}
	f.Add([]byte{0xfa, 0x01, 0x00}, []byte("r"), []byte{}) // an unknown field
	f.Fuzz(func(t *testing.T, b, key, value []byte) {
		var p btpb.RowFilter
		if proto.Unmarshal(b, &p) != nil {
			return
		}
		flt, err := FilterFromProto(&p)
		if err != nil {
			if !errors.Is(err, filter.ErrInvalid) {
				t.Fatalf("FilterFromProto(%v): %v does not wrap filter.ErrInvalid", &p, err)
			}
			return
		}
		prog, err := filter.Compile(flt, filter.Options{Rand: func() float64 { return 0.5 }})
		if err != nil {
			if !errors.Is(err, filter.ErrInvalid) {
				t.Fatalf("Compile(%v): %v does not wrap filter.ErrInvalid", &p, err)
			}
			return
		}
		prog.Apply(cell.Row{Key: key, Cells: []cell.Cell{
			{Family: "f", Qualifier: value, Timestamp: 2000, Value: value},
			{Family: "f", Qualifier: value, Timestamp: 1000, Value: key},
			{Family: "g", Qualifier: []byte("q"), Timestamp: 1000, Value: value},
		}})
	})
}

// FuzzGCRuleFromProto unmarshals arbitrary bytes as a GcRule (what
// CreateTable and ModifyColumnFamilies carry). Refusals wrap
// gcrule.ErrInvalid; a rule that converts either fails Validate (with
// gcrule.ErrInvalid) or converts back to an equal proto whose rule is the
// same, and that the JSON the schema stores reads back equal.
func FuzzGCRuleFromProto(f *testing.F) {
	for _, s := range []*adminpb.GcRule{
		pbAge(86400, 0), pbVers(3), pbUnion(pbAge(1, 500), pbVers(1)), pbInter(pbVers(2), pbAge(3600, 0)),
		pbUnion(pbInter(pbVers(1), pbAge(1, 0)), &adminpb.GcRule{}), pbUnion(), pbVers(0), pbVers(-1),
		{Rule: &adminpb.GcRule_MaxAge{MaxAge: &durationpb.Duration{Seconds: 1 << 40}}},
		{Rule: &adminpb.GcRule_MaxAge{MaxAge: &durationpb.Duration{Seconds: -1, Nanos: 5}}},
		{},
	} {
		f.Add(mustMarshal(f, s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p adminpb.GcRule
		if proto.Unmarshal(b, &p) != nil {
			return
		}
		r, err := GCRuleFromProto(&p)
		if err != nil {
			if !errors.Is(err, gcrule.ErrInvalid) {
				t.Fatalf("GCRuleFromProto(%v): %v does not wrap gcrule.ErrInvalid", &p, err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			if !errors.Is(err, gcrule.ErrInvalid) {
				t.Fatalf("Validate(%v): %v does not wrap gcrule.ErrInvalid", r, err)
			}
			return
		}
		back := GCRuleToProto(r)
		again, err := GCRuleFromProto(back)
		if err != nil || again.String() != r.String() {
			t.Fatalf("%v → %v → %v → %v, %v", &p, r, back, again, err)
		}
		// Unknown fields are dropped: compare only protos fully understood.
		if understood := proto.Equal(stripUnknown(proto.Clone(&p)), &p); !r.IsNone() && understood && !proto.Equal(back, &p) {
			t.Fatalf("%v converts back to %v", &p, back)
		}
		// The schema keeps (and replication ships) the rule as JSON.
		js, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("rule %v does not encode: %v", r, err)
		}
		var stored gcrule.Rule
		if err := json.Unmarshal(js, &stored); err != nil || !stored.Equal(r) {
			t.Fatalf("rule %v: stored as %s, reads back as %v, %v", r, js, stored, err)
		}
	})
}

// stripUnknown drops unknown fields from a GcRule tree.
func stripUnknown(m proto.Message) proto.Message {
	p := m.(*adminpb.GcRule)
	p.ProtoReflect().SetUnknown(nil)
	for _, c := range append(p.GetUnion().GetRules(), p.GetIntersection().GetRules()...) {
		stripUnknown(c)
	}
	if u := p.GetUnion(); u != nil {
		u.ProtoReflect().SetUnknown(nil)
	}
	if i := p.GetIntersection(); i != nil {
		i.ProtoReflect().SetUnknown(nil)
	}
	if a := p.GetMaxAge(); a != nil {
		a.ProtoReflect().SetUnknown(nil)
	}
	return p
}

// FuzzValueTypeFromProto unmarshals arbitrary bytes as a family's value
// type: refusals wrap table.ErrInvalid, and an accepted type is kept as
// given (it decodes back to an equal proto).
func FuzzValueTypeFromProto(f *testing.F) {
	i64 := &adminpb.Type{Kind: &adminpb.Type_Int64Type{Int64Type: &adminpb.Type_Int64{}}}
	for _, s := range []*adminpb.Type{
		i64,
		{Kind: &adminpb.Type_AggregateType{AggregateType: &adminpb.Type_Aggregate{InputType: i64, Aggregator: &adminpb.Type_Aggregate_Sum_{Sum: &adminpb.Type_Aggregate_Sum{}}}}},
		{Kind: &adminpb.Type_AggregateType{AggregateType: &adminpb.Type_Aggregate{InputType: i64}}},
		{Kind: &adminpb.Type_AggregateType{AggregateType: &adminpb.Type_Aggregate{InputType: &adminpb.Type{Kind: &adminpb.Type_BytesType{BytesType: &adminpb.Type_Bytes{}}},
			Aggregator: &adminpb.Type_Aggregate_Max_{Max: &adminpb.Type_Aggregate_Max{}}}}},
		{},
	} {
		f.Add(mustMarshal(f, s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p adminpb.Type
		if proto.Unmarshal(b, &p) != nil {
			return
		}
		enc, _, err := ValueTypeFromProto(&p)
		if err != nil {
			if !errors.Is(err, table.ErrInvalid) {
				t.Fatalf("ValueTypeFromProto(%v): %v does not wrap table.ErrInvalid", &p, err)
			}
			return
		}
		if back := ValueTypeToProto(enc); len(enc) > 0 && !proto.Equal(back, &p) {
			t.Fatalf("%v is kept as %x, which decodes to %v", &p, enc, back)
		}
	})
}
