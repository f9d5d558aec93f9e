package server

import (
	"fmt"
	"math"
	"time"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/sqlquery"
	"google.golang.org/genproto/googleapis/type/date"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// This file converts between sqlquery's types and values and the data
// API's Type and Value protos.

func typeToProto(t *sqlquery.Type) *btpb.Type {
	switch t.Kind {
	case sqlquery.KindBytes:
		return &btpb.Type{Kind: &btpb.Type_BytesType{BytesType: &btpb.Type_Bytes{}}}
	case sqlquery.KindString:
		return &btpb.Type{Kind: &btpb.Type_StringType{StringType: &btpb.Type_String{}}}
	case sqlquery.KindInt64, sqlquery.KindNull:
		return &btpb.Type{Kind: &btpb.Type_Int64Type{Int64Type: &btpb.Type_Int64{}}}
	case sqlquery.KindFloat32:
		return &btpb.Type{Kind: &btpb.Type_Float32Type{Float32Type: &btpb.Type_Float32{}}}
	case sqlquery.KindFloat64:
		return &btpb.Type{Kind: &btpb.Type_Float64Type{Float64Type: &btpb.Type_Float64{}}}
	case sqlquery.KindBool:
		return &btpb.Type{Kind: &btpb.Type_BoolType{BoolType: &btpb.Type_Bool{}}}
	case sqlquery.KindTimestamp:
		return &btpb.Type{Kind: &btpb.Type_TimestampType{TimestampType: &btpb.Type_Timestamp{}}}
	case sqlquery.KindDate:
		return &btpb.Type{Kind: &btpb.Type_DateType{DateType: &btpb.Type_Date{}}}
	case sqlquery.KindArray:
		return &btpb.Type{Kind: &btpb.Type_ArrayType{ArrayType: &btpb.Type_Array{ElementType: typeToProto(t.Elem)}}}
	case sqlquery.KindMap:
		return &btpb.Type{Kind: &btpb.Type_MapType{MapType: &btpb.Type_Map{KeyType: typeToProto(t.Key), ValueType: typeToProto(t.Val)}}}
	case sqlquery.KindStruct:
		st := &btpb.Type_Struct{}
		for _, f := range t.Fields {
			st.Fields = append(st.Fields, &btpb.Type_Struct_Field{FieldName: f.Name, Type: typeToProto(f.Type)})
		}
		return &btpb.Type{Kind: &btpb.Type_StructType{StructType: st}}
	}
	return nil
}

// typeFromProto converts a parameter type.
func typeFromProto(t *btpb.Type) (*sqlquery.Type, error) {
	switch k := t.GetKind().(type) {
	case *btpb.Type_BytesType:
		return sqlquery.TBytes, nil
	case *btpb.Type_StringType:
		return sqlquery.TString, nil
	case *btpb.Type_Int64Type:
		return sqlquery.TInt64, nil
	case *btpb.Type_Float32Type:
		return sqlquery.TFloat32, nil
	case *btpb.Type_Float64Type:
		return sqlquery.TFloat64, nil
	case *btpb.Type_BoolType:
		return sqlquery.TBool, nil
	case *btpb.Type_TimestampType:
		return sqlquery.TTimestamp, nil
	case *btpb.Type_DateType:
		return sqlquery.TDate, nil
	case *btpb.Type_ArrayType:
		e, err := typeFromProto(k.ArrayType.GetElementType())
		if err != nil {
			return nil, err
		}
		return sqlquery.ArrayOf(e), nil
	case *btpb.Type_MapType:
		kt, err := typeFromProto(k.MapType.GetKeyType())
		if err != nil {
			return nil, err
		}
		vt, err := typeFromProto(k.MapType.GetValueType())
		if err != nil {
			return nil, err
		}
		return sqlquery.MapOf(kt, vt), nil
	case *btpb.Type_StructType:
		st := &sqlquery.Type{Kind: sqlquery.KindStruct}
		for _, f := range k.StructType.GetFields() {
			ft, err := typeFromProto(f.GetType())
			if err != nil {
				return nil, err
			}
			st.Fields = append(st.Fields, sqlquery.Field{Name: f.GetFieldName(), Type: ft})
		}
		return st, nil
	}
	return nil, fmt.Errorf("%w: unsupported parameter type %v", sqlquery.ErrInvalid, t)
}

// valueToProto encodes a result value (untyped: the metadata types it).
func valueToProto(v sqlquery.Value) *btpb.Value {
	switch x := v.(type) {
	case nil:
		return &btpb.Value{}
	case []byte:
		return &btpb.Value{Kind: &btpb.Value_BytesValue{BytesValue: x}}
	case string:
		return &btpb.Value{Kind: &btpb.Value_StringValue{StringValue: x}}
	case int64:
		return &btpb.Value{Kind: &btpb.Value_IntValue{IntValue: x}}
	case float64:
		return &btpb.Value{Kind: &btpb.Value_FloatValue{FloatValue: x}}
	case float32:
		return &btpb.Value{Kind: &btpb.Value_FloatValue{FloatValue: float64(x)}}
	case bool:
		return &btpb.Value{Kind: &btpb.Value_BoolValue{BoolValue: x}}
	case time.Time:
		return &btpb.Value{Kind: &btpb.Value_TimestampValue{TimestampValue: timestamppb.New(x)}}
	case sqlquery.Date:
		return &btpb.Value{Kind: &btpb.Value_DateValue{DateValue: &date.Date{Year: int32(x.Year), Month: int32(x.Month), Day: int32(x.Day)}}}
	case sqlquery.Array:
		return arrayProto([]sqlquery.Value(x))
	case sqlquery.Struct:
		return arrayProto([]sqlquery.Value(x))
	case *sqlquery.Map:
		entries := make([]*btpb.Value, len(x.Keys))
		for i := range x.Keys {
			entries[i] = &btpb.Value{Kind: &btpb.Value_ArrayValue{ArrayValue: &btpb.ArrayValue{Values: []*btpb.Value{valueToProto(x.Keys[i]), valueToProto(x.Vals[i])}}}}
		}
		return &btpb.Value{Kind: &btpb.Value_ArrayValue{ArrayValue: &btpb.ArrayValue{Values: entries}}}
	}
	return &btpb.Value{}
}

func arrayProto(vs []sqlquery.Value) *btpb.Value {
	out := make([]*btpb.Value, len(vs))
	for i, e := range vs {
		out[i] = valueToProto(e)
	}
	return &btpb.Value{Kind: &btpb.Value_ArrayValue{ArrayValue: &btpb.ArrayValue{Values: out}}}
}

// valueFromProto decodes a parameter value of type t. A Value with no kind
// is NULL.
func valueFromProto(v *btpb.Value, t *sqlquery.Type) (sqlquery.Value, error) {
	bad := func() (sqlquery.Value, error) {
		return nil, fmt.Errorf("%w: parameter value %v does not fit type %s", sqlquery.ErrInvalid, v, t)
	}
	if v.GetKind() == nil {
		return nil, nil
	}
	switch t.Kind {
	case sqlquery.KindBytes:
		if k, ok := v.Kind.(*btpb.Value_BytesValue); ok {
			if k.BytesValue == nil {
				return []byte{}, nil
			}
			return k.BytesValue, nil
		}
	case sqlquery.KindString:
		if k, ok := v.Kind.(*btpb.Value_StringValue); ok {
			return k.StringValue, nil
		}
	case sqlquery.KindInt64:
		if k, ok := v.Kind.(*btpb.Value_IntValue); ok {
			return k.IntValue, nil
		}
	case sqlquery.KindFloat32:
		if k, ok := v.Kind.(*btpb.Value_FloatValue); ok {
			if math.Abs(k.FloatValue) > math.MaxFloat32 && !math.IsInf(k.FloatValue, 0) {
				return bad()
			}
			return float32(k.FloatValue), nil
		}
	case sqlquery.KindFloat64:
		if k, ok := v.Kind.(*btpb.Value_FloatValue); ok {
			return k.FloatValue, nil
		}
	case sqlquery.KindBool:
		if k, ok := v.Kind.(*btpb.Value_BoolValue); ok {
			return k.BoolValue, nil
		}
	case sqlquery.KindTimestamp:
		if k, ok := v.Kind.(*btpb.Value_TimestampValue); ok {
			if err := k.TimestampValue.CheckValid(); err != nil {
				return bad()
			}
			return k.TimestampValue.AsTime().UTC(), nil
		}
	case sqlquery.KindDate:
		if k, ok := v.Kind.(*btpb.Value_DateValue); ok {
			d := k.DateValue
			tm := time.Date(int(d.GetYear()), time.Month(d.GetMonth()), int(d.GetDay()), 0, 0, 0, 0, time.UTC)
			if d.GetYear() < 1 || d.GetYear() > 9999 || tm.Day() != int(d.GetDay()) || int32(tm.Month()) != d.GetMonth() {
				return bad()
			}
			return sqlquery.Date{Year: int(d.GetYear()), Month: int(d.GetMonth()), Day: int(d.GetDay())}, nil
		}
	case sqlquery.KindArray, sqlquery.KindStruct, sqlquery.KindMap:
		k, ok := v.Kind.(*btpb.Value_ArrayValue)
		if !ok {
			return bad()
		}
		vals := k.ArrayValue.GetValues()
		switch t.Kind {
		case sqlquery.KindArray:
			out := make(sqlquery.Array, len(vals))
			for i, e := range vals {
				var err error
				if out[i], err = valueFromProto(e, t.Elem); err != nil {
					return nil, err
				}
			}
			return out, nil
		case sqlquery.KindStruct:
			if len(vals) != len(t.Fields) {
				return bad()
			}
			out := make(sqlquery.Struct, len(vals))
			for i, e := range vals {
				var err error
				if out[i], err = valueFromProto(e, t.Fields[i].Type); err != nil {
					return nil, err
				}
			}
			return out, nil
		default:
			m := &sqlquery.Map{}
			for _, e := range vals {
				kv := e.GetArrayValue().GetValues()
				if len(kv) != 2 {
					return bad()
				}
				key, err := valueFromProto(kv[0], t.Key)
				if err != nil {
					return nil, err
				}
				val, err := valueFromProto(kv[1], t.Val)
				if err != nil {
					return nil, err
				}
				m.Keys, m.Vals = append(m.Keys, key), append(m.Vals, val)
			}
			return m, nil
		}
	}
	return bad()
}

// SQLColumn decodes a result column's type (clients such as the CLI use
// it to read ExecuteQuery results).
func SQLColumn(t *btpb.Type) (*sqlquery.Type, error) { return typeFromProto(t) }

// SQLValue decodes a result value of type t.
func SQLValue(v *btpb.Value, t *sqlquery.Type) (sqlquery.Value, error) { return valueFromProto(v, t) }
