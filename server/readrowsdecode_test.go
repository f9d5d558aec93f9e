package server

import (
	"math/rand/v2"
	"testing"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// readRowsCases are requests the hand decoder must decode as protobuf does
// (decodes: true), or leave to it.
func readRowsCases() []struct {
	name    string
	req     *btpb.ReadRowsRequest
	decodes bool
} {
	const table = "projects/p/instances/i/tables/t"
	keys := func(ks ...[]byte) *btpb.RowSet { return &btpb.RowSet{RowKeys: ks} }
	return []struct {
		name    string
		req     *btpb.ReadRowsRequest
		decodes bool
	}{
		{"empty", &btpb.ReadRowsRequest{}, true},
		{"point read", &btpb.ReadRowsRequest{TableName: table, Rows: keys([]byte("row-0000123")), RowsLimit: 1}, true},
		{"whole table", &btpb.ReadRowsRequest{TableName: table, AppProfileId: "default"}, true},
		{"empty row set", &btpb.ReadRowsRequest{TableName: table, Rows: &btpb.RowSet{}}, true},
		{"every field handled", &btpb.ReadRowsRequest{AuthorizedViewName: table + "/authorizedViews/v", AppProfileId: "p",
			Rows: keys([]byte("a"), []byte{}, []byte{0, 0xff}, nil, make([]byte, 300)), RowsLimit: -5,
			RequestStatsView: btpb.ReadRowsRequest_REQUEST_STATS_FULL, Reversed: true}, true},
		{"unknown stats view", &btpb.ReadRowsRequest{TableName: table, RequestStatsView: 77}, true},
		{"a filter", &btpb.ReadRowsRequest{TableName: table, Rows: keys([]byte("a")),
			Filter: &btpb.RowFilter{Filter: &btpb.RowFilter_CellsPerColumnLimitFilter{CellsPerColumnLimitFilter: 1}}}, false},
		{"a range", &btpb.ReadRowsRequest{TableName: table, Rows: &btpb.RowSet{RowKeys: [][]byte{[]byte("a")},
			RowRanges: []*btpb.RowRange{{StartKey: &btpb.RowRange_StartKeyClosed{StartKeyClosed: []byte("b")}}}}}, false},
		{"a materialized view", &btpb.ReadRowsRequest{MaterializedViewName: "projects/p/instances/i/materializedViews/m"}, false},
	}
}

// TestDecodeReadRows: the hand decoder yields what proto.Unmarshal does, or
// declines without touching the request; its row keys are non-nil as
// protobuf's, do not share capacity, and do not alias the encoding.
func TestDecodeReadRows(t *testing.T) {
	for _, c := range readRowsCases() {
		b, err := proto.Marshal(c.req)
		if err != nil {
			t.Fatal(err)
		}
		var got btpb.ReadRowsRequest
		if ok := decodeReadRows(b, &got); ok != c.decodes {
			t.Fatalf("%s: decoded %v, want %v", c.name, ok, c.decodes)
		}
		if !c.decodes {
			if !proto.Equal(&got, &btpb.ReadRowsRequest{}) {
				t.Fatalf("%s: declined but changed the request: %v", c.name, &got)
			}
			continue
		}
		want := checkSameReadRows(t, c.name, b, &got)
		for i := range b { // gRPC reuses the buffer
			b[i] = 0xee
		}
		if !proto.Equal(&got, want) {
			t.Fatalf("%s: the decoded request changed with its encoding", c.name)
		}
	}
}

// checkSameReadRows fails t unless got is what proto.Unmarshal makes of b,
// down to what proto.Equal does not tell: a nil or empty row set, a nil or
// empty row key, and spare capacity of a key. It returns protobuf's.
func checkSameReadRows(t *testing.T, name string, b []byte, got *btpb.ReadRowsRequest) *btpb.ReadRowsRequest {
	t.Helper()
	want := &btpb.ReadRowsRequest{}
	if err := proto.Unmarshal(b, want); err != nil {
		t.Fatalf("%s: decoded what protobuf refuses (%v): %v", name, err, got)
	}
	if !proto.Equal(got, want) {
		t.Fatalf("%s: decoded\n%v\nwant\n%v", name, got, want)
	}
	if (got.Rows == nil) != (want.Rows == nil) || (got.GetRows().GetRowKeys() == nil) != (want.GetRows().GetRowKeys() == nil) {
		t.Fatalf("%s: row set %v, want %v (nil-ness differs)", name, got.Rows, want.Rows)
	}
	for i, k := range got.GetRows().GetRowKeys() {
		if (k == nil) != (want.Rows.RowKeys[i] == nil) {
			t.Fatalf("%s: key %d is %#v, want %#v", name, i, k, want.Rows.RowKeys[i])
		}
		if cap(k) != len(k) {
			t.Fatalf("%s: key %d has spare capacity", name, i)
		}
	}
	return want
}

// TestDecodeReadRowsDeclines: unknown fields, fields of another wire type,
// strings that are not UTF-8 and broken encodings are left to protobuf,
// the request untouched.
func TestDecodeReadRowsDeclines(t *testing.T) {
	str := func(num protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), s)
	}
	varint := func(num protowire.Number, x uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), x)
	}
	rows := func(inner []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), inner)
	}
	good := append(str(1, "t"), rows(str(1, "k"))...)
	var req btpb.ReadRowsRequest
	if !decodeReadRows(good, &req) || req.TableName != "t" || string(req.GetRows().GetRowKeys()[0]) != "k" {
		t.Fatalf("the well-formed request was not decoded: %v", &req)
	}
	for name, b := range map[string][]byte{
		"unknown request field":  str(12, "x"),
		"filter":                 protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), nil),
		"varint table name":      varint(1, 1),
		"bytes rows limit":       str(4, "1"),
		"bytes reversed":         str(7, ""),
		"varint row set":         varint(2, 0),
		"table name not UTF-8":   str(1, "\xff"),
		"app profile not UTF-8":  str(5, "a\xc0"),
		"view name not UTF-8":    str(9, "\xed\xa0\x80"),
		"row range":              rows(str(2, "")),
		"varint row key":         rows(varint(1, 3)),
		"unknown row set field":  rows(str(3, "k")),
		"truncated":              good[:len(good)-1],
		"truncated row set":      rows(str(1, "k"))[:4],
		"field number zero":      {0x02, 0x00},
		"fixed64 field":          protowire.AppendFixed64(protowire.AppendTag(nil, 4, protowire.Fixed64Type), 1),
		"overlong varint":        append(protowire.AppendTag(nil, 4, protowire.VarintType), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
		"materialized view name": str(11, "m"),
	} {
		var req btpb.ReadRowsRequest
		if decodeReadRows(b, &req) {
			t.Errorf("%s: decoded, want declined", name)
		}
		if !proto.Equal(&req, &btpb.ReadRowsRequest{}) {
			t.Errorf("%s: declined but changed the request", name)
		}
	}
}

// TestDecodeReadRowsCorrupted: the cases' encodings with bytes changed at
// random, and random concatenations of their fields (a field given twice:
// the last string or number wins, row sets merge), checked against
// proto.Unmarshal.
func TestDecodeReadRowsCorrupted(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	var encs [][]byte
	for _, c := range readRowsCases() {
		if b, _ := proto.Marshal(c.req); len(b) > 0 {
			encs = append(encs, b)
		}
	}
	decoded := 0
	check := func(b []byte) {
		var got btpb.ReadRowsRequest
		if decodeReadRows(b, &got) {
			checkSameReadRows(t, "corrupted", b, &got)
			decoded++
		}
	}
	for range 20000 {
		b := append([]byte{}, encs[r.IntN(len(encs))]...)
		for range 1 + r.IntN(3) {
			b[r.IntN(len(b))] = byte(r.Uint32())
		}
		check(b)
		b = append(append([]byte{}, encs[r.IntN(len(encs))]...), encs[r.IntN(len(encs))]...)
		check(b)
	}
	if decoded < 10000 {
		t.Fatalf("only %d altered encodings were decoded: the check checked too little", decoded)
	}
}

// FuzzDecodeReadRows: on any input the hand decoder either declines or
// yields what proto.Unmarshal yields.
func FuzzDecodeReadRows(f *testing.F) {
	for _, c := range readRowsCases() {
		b, _ := proto.Marshal(c.req)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got btpb.ReadRowsRequest
		if decodeReadRows(b, &got) {
			checkSameReadRows(t, "fuzz", b, &got)
		}
	})
}

// BenchmarkDecodeReadRows: a point read's request, decoded by hand and by
// protobuf.
//
//	go test -run '^$' -bench DecodeReadRows -benchmem ./server
func BenchmarkDecodeReadRows(b *testing.B) {
	enc, err := proto.Marshal(readRowsCases()[1].req)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r btpb.ReadRowsRequest
			if !decodeReadRows(enc, &r) {
				b.Fatal("declined")
			}
		}
	})
	b.Run("protobuf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r btpb.ReadRowsRequest
			if err := proto.Unmarshal(enc, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
