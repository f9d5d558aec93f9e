package server

import (
	"math"
	"testing"
	"time"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/sqlquery"
	"google.golang.org/protobuf/proto"
)

// The hand encoding of result rows equals proto.Marshal of the messages
// valueToProto builds.
func TestSQLEncodeMatchesProto(t *testing.T) {
	vals := []sqlquery.Value{
		nil, []byte{}, []byte("abc"), "", "héllo", int64(0), int64(-1), int64(math.MaxInt64), true, false,
		0.0, -2.5, float32(1.25), math.Inf(1),
		time.Unix(0, 0).UTC(), time.Unix(-5, 7000).UTC(), time.Date(2024, 6, 1, 12, 0, 0, 123456000, time.UTC),
		sqlquery.Date{Year: 2024, Month: 6, Day: 1}, sqlquery.Date{},
		sqlquery.Array{}, sqlquery.Array{int64(1), nil, int64(3)},
		sqlquery.Struct{time.Unix(1, 0).UTC(), []byte("v")},
		&sqlquery.Map{}, &sqlquery.Map{Keys: []sqlquery.Value{[]byte("a"), []byte("b")}, Vals: []sqlquery.Value{[]byte("x"), sqlquery.Array{sqlquery.Struct{time.Unix(2, 0).UTC(), []byte("y")}}}},
	}
	var got []byte
	want := &btpb.ProtoRows{}
	for _, v := range vals {
		got = appendRowValue(got, v)
		want.Values = append(want.Values, valueToProto(v))
	}
	back := &btpb.ProtoRows{}
	if err := proto.Unmarshal(got, back); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(back, want) {
		t.Fatalf("decoded\n%v\nwant\n%v", back, want)
	}
	wb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(want)
	if string(wb) != string(got) {
		t.Errorf("encoding differs from proto.Marshal:\n%x\n%x", got, wb)
	}
}
