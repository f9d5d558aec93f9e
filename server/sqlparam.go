package server

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/genproto/googleapis/type/date"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// SQLParamTypes are the query parameter types a value typed as text can
// have (`ebbtable sql --param`, the console's SQL page).
var SQLParamTypes = []string{"STRING", "BYTES", "INT64", "FLOAT64", "BOOL", "TIMESTAMP", "DATE"}

// ParseSQLParam reads a query parameter's value of type typ (one of
// SQLParamTypes) from text: BYTES as the text's bytes, TIMESTAMP in RFC
// 3339, DATE as YYYY-MM-DD. The value carries its type.
func ParseSQLParam(typ, text string) (*btpb.Type, *btpb.Value, error) {
	var t *btpb.Type
	v := &btpb.Value{}
	switch strings.ToUpper(typ) {
	case "STRING":
		t = &btpb.Type{Kind: &btpb.Type_StringType{StringType: &btpb.Type_String{}}}
		v.Kind = &btpb.Value_StringValue{StringValue: text}
	case "BYTES":
		t = &btpb.Type{Kind: &btpb.Type_BytesType{BytesType: &btpb.Type_Bytes{}}}
		v.Kind = &btpb.Value_BytesValue{BytesValue: []byte(text)}
	case "INT64":
		n, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("not an INT64: %q", text)
		}
		t = &btpb.Type{Kind: &btpb.Type_Int64Type{Int64Type: &btpb.Type_Int64{}}}
		v.Kind = &btpb.Value_IntValue{IntValue: n}
	case "FLOAT64":
		f, err := strconv.ParseFloat(strings.TrimSpace(text), 64)
		if err != nil {
			return nil, nil, fmt.Errorf("not a FLOAT64: %q", text)
		}
		t = &btpb.Type{Kind: &btpb.Type_Float64Type{Float64Type: &btpb.Type_Float64{}}}
		v.Kind = &btpb.Value_FloatValue{FloatValue: f}
	case "BOOL":
		b, err := strconv.ParseBool(strings.TrimSpace(text))
		if err != nil {
			return nil, nil, fmt.Errorf("not a BOOL: %q", text)
		}
		t = &btpb.Type{Kind: &btpb.Type_BoolType{BoolType: &btpb.Type_Bool{}}}
		v.Kind = &btpb.Value_BoolValue{BoolValue: b}
	case "TIMESTAMP":
		ts, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(text))
		if err != nil {
			return nil, nil, fmt.Errorf("not an RFC 3339 TIMESTAMP: %q", text)
		}
		t = &btpb.Type{Kind: &btpb.Type_TimestampType{TimestampType: &btpb.Type_Timestamp{}}}
		v.Kind = &btpb.Value_TimestampValue{TimestampValue: timestamppb.New(ts)}
	case "DATE":
		d, err := time.Parse("2006-01-02", strings.TrimSpace(text))
		if err != nil {
			return nil, nil, fmt.Errorf("not a YYYY-MM-DD DATE: %q", text)
		}
		t = &btpb.Type{Kind: &btpb.Type_DateType{DateType: &btpb.Type_Date{}}}
		v.Kind = &btpb.Value_DateValue{DateValue: &date.Date{Year: int32(d.Year()), Month: int32(d.Month()), Day: int32(d.Day())}}
	default:
		return nil, nil, fmt.Errorf("unknown type %q", typ)
	}
	v.Type = t
	return t, v, nil
}
