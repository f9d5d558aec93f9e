package server

import (
	"math/rand/v2"
	"testing"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// mutateRowsCases are requests the hand decoder must decode as protobuf
// does (decodes: true), or leave to it.
func mutateRowsCases() []struct {
	name    string
	req     *btpb.MutateRowsRequest
	decodes bool
} {
	set := setCellMutation
	bulk := &btpb.MutateRowsRequest{TableName: "projects/p/instances/i/tables/t", AppProfileId: "default"}
	for i := range 100 {
		bulk.Entries = append(bulk.Entries, &btpb.MutateRowsRequest_Entry{
			RowKey:    []byte{'r', byte(i), 0, 0xff},
			Mutations: []*btpb.Mutation{set("f", []byte("c"), make([]byte, 100), int64(i)*1000)}})
	}
	many := &btpb.MutateRowsRequest{TableName: "t", AuthorizedViewName: "v", Entries: []*btpb.MutateRowsRequest_Entry{
		{RowKey: []byte("a"), Mutations: []*btpb.Mutation{
			set("f", []byte("q1"), []byte("v1"), -1),
			set("g", nil, nil, 0),
			set("f", []byte{}, []byte{}, 1<<62),
			{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{}}, TimestampOrigin: 2},
		}},
		{},
		{RowKey: []byte("b")},
		{Mutations: []*btpb.Mutation{set("", []byte("q"), []byte("v"), 5)}},
	}}
	del := &btpb.MutateRowsRequest{TableName: "t", Entries: []*btpb.MutateRowsRequest_Entry{
		{RowKey: []byte("a"), Mutations: []*btpb.Mutation{set("f", nil, nil, 1),
			{Mutation: &btpb.Mutation_DeleteFromRow_{DeleteFromRow: &btpb.Mutation_DeleteFromRow{}}}}}}}
	idem := &btpb.MutateRowsRequest{TableName: "t", Entries: []*btpb.MutateRowsRequest_Entry{
		{RowKey: []byte("a"), Mutations: []*btpb.Mutation{set("f", nil, nil, 1)},
			Idempotency: &btpb.Idempotency{Token: []byte("tok")}}}}
	add := &btpb.MutateRowsRequest{TableName: "t", Entries: []*btpb.MutateRowsRequest_Entry{
		{RowKey: []byte("a"), Mutations: []*btpb.Mutation{{Mutation: &btpb.Mutation_AddToCell_{AddToCell: &btpb.Mutation_AddToCell{
			FamilyName: "f", Input: &btpb.Value{Kind: &btpb.Value_IntValue{IntValue: 1}}}}}}}}}
	return []struct {
		name    string
		req     *btpb.MutateRowsRequest
		decodes bool
	}{
		{"empty", &btpb.MutateRowsRequest{}, true},
		{"bulk", bulk, true},
		{"many shapes", many, true},
		{"a delete", del, false},
		{"idempotency", idem, false},
		{"add to cell", add, false},
	}
}

// TestDecodeMutateRows: the hand decoder yields what proto.Unmarshal does,
// or declines; its byte fields do not share capacity.
func TestDecodeMutateRows(t *testing.T) {
	t.Parallel()
	for _, c := range mutateRowsCases() {
		b, err := proto.Marshal(c.req)
		if err != nil {
			t.Fatal(err)
		}
		var got btpb.MutateRowsRequest
		if ok := decodeMutateRows(b, &got); ok != c.decodes {
			t.Fatalf("%s: decoded %v, want %v", c.name, ok, c.decodes)
		}
		if !c.decodes {
			if !proto.Equal(&got, &btpb.MutateRowsRequest{}) {
				t.Fatalf("%s: declined but changed the request: %v", c.name, &got)
			}
			continue
		}
		var want btpb.MutateRowsRequest
		if err := proto.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&got, &want) {
			t.Fatalf("%s: decoded\n%v\nwant\n%v", c.name, &got, &want)
		}
		// nil where protobuf leaves nil (proto.Equal does not tell).
		for i, e := range got.Entries {
			if (e.RowKey == nil) != (want.Entries[i].RowKey == nil) {
				t.Fatalf("%s: entry %d row key %q, want %q", c.name, i, e.RowKey, want.Entries[i].RowKey)
			}
			for j, m := range e.Mutations {
				s, w := m.GetSetCell(), want.Entries[i].Mutations[j].GetSetCell()
				if (s.Value == nil) != (w.Value == nil) || (s.ColumnQualifier == nil) != (w.ColumnQualifier == nil) {
					t.Fatalf("%s: entry %d mutation %d: nil-ness differs: %v / %v", c.name, i, j, s, w)
				}
				if cap(s.Value) != len(s.Value) || cap(s.ColumnQualifier) != len(s.ColumnQualifier) {
					t.Fatalf("%s: entry %d mutation %d: a byte field has spare capacity", c.name, i, j)
				}
			}
			if cap(e.RowKey) != len(e.RowKey) {
				t.Fatalf("%s: entry %d: row key has spare capacity", c.name, i)
			}
		}
		// The decoded request does not alias the encoding (gRPC reuses it).
		for i := range b {
			b[i] = 0xee
		}
		if !proto.Equal(&got, &want) {
			t.Fatalf("%s: the decoded request changed with its encoding", c.name)
		}
	}
}

// TestDecodeMutateRowsDeclines: what the hand decoder leaves to protobuf —
// unknown fields, a doubled set_cell, strings that are not UTF-8, broken
// encodings — it declines without touching the request.
func TestDecodeMutateRowsDeclines(t *testing.T) {
	setCell := protowire.AppendTag(nil, 1, protowire.BytesType)
	setCell = protowire.AppendBytes(setCell, protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "f"))
	mutation := func(m []byte) []byte {
		e := protowire.AppendTag(nil, 2, protowire.BytesType)
		e = protowire.AppendBytes(e, m)
		return protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), e)
	}
	good := mutation(setCell)
	var req btpb.MutateRowsRequest
	if !decodeMutateRows(good, &req) || len(req.Entries) != 1 || req.Entries[0].Mutations[0].GetSetCell().GetFamilyName() != "f" {
		t.Fatalf("the well-formed request was not decoded: %v", &req)
	}
	for name, b := range map[string][]byte{
		"unknown request field": protowire.AppendString(protowire.AppendTag(nil, 9, protowire.BytesType), "x"),
		"varint table name":     protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1),
		"table name not UTF-8":  protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "\xff"),
		"family not UTF-8": mutation(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType),
			protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "\xfe"))),
		"two set_cells": mutation(append(append([]byte{}, setCell...), setCell...)),
		"no set_cell":   mutation(protowire.AppendVarint(protowire.AppendTag(nil, 7, protowire.VarintType), 1)),
		"truncated":     good[:len(good)-1],
		"unknown setcell field": mutation(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType),
			protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 1))),
		"field number zero": {0x02, 0x00},
	} {
		var req btpb.MutateRowsRequest
		if decodeMutateRows(b, &req) {
			t.Errorf("%s: decoded, want declined", name)
		}
		if !proto.Equal(&req, &btpb.MutateRowsRequest{}) {
			t.Errorf("%s: declined but changed the request", name)
		}
	}
}

// TestDecodeMutateRowsCorrupted: the cases' encodings with bytes changed at
// random, checked as FuzzDecodeMutateRows does. A request of many entries
// of one shape is cut to its first four (first, middle and last entries
// alike): its other entries only repeat them, and a corruption among them
// cost as much under -race as the other cases' put together.
func TestDecodeMutateRowsCorrupted(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	decoded := 0
	for _, c := range mutateRowsCases() {
		corruptMutateRows(r, c.req, func(b []byte) {
			if checkDecodeMutateRows(t, b) {
				decoded++
			}
		})
	}
	if decoded == 0 {
		t.Fatal("no corrupted encoding was decoded: the check checked nothing")
	}
}

// corruptMutateRows calls fn with 3,000 encodings of req, its first four
// entries at most, each with one to three bytes changed at random.
func corruptMutateRows(r *rand.Rand, req *btpb.MutateRowsRequest, fn func(b []byte)) {
	req = proto.Clone(req).(*btpb.MutateRowsRequest)
	req.Entries = req.Entries[:min(len(req.Entries), 4)]
	orig, _ := proto.Marshal(req)
	if len(orig) == 0 {
		return
	}
	for range 3000 {
		b := append([]byte{}, orig...)
		for range 1 + r.IntN(3) {
			b[r.IntN(len(b))] = byte(r.Uint32())
		}
		fn(b)
	}
}

// checkDecodeMutateRows fails t if decodeMutateRows decodes b otherwise
// than proto.Unmarshal; it reports whether it decoded b.
func checkDecodeMutateRows(t *testing.T, b []byte) bool {
	t.Helper()
	var got btpb.MutateRowsRequest
	if !decodeMutateRows(b, &got) {
		return false
	}
	var want btpb.MutateRowsRequest
	if err := proto.Unmarshal(b, &want); err != nil {
		t.Fatalf("decoded what protobuf refuses (%v): %v", err, &got)
	}
	if !proto.Equal(&got, &want) {
		t.Fatalf("decoded\n%v\nwant\n%v", &got, &want)
	}
	return true
}

// FuzzDecodeMutateRows: on any input the hand decoder either declines or
// yields what proto.Unmarshal yields.
func FuzzDecodeMutateRows(f *testing.F) {
	for _, c := range mutateRowsCases() {
		b, _ := proto.Marshal(c.req)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecodeMutateRows(t, b)
	})
}

// BenchmarkDecodeMutateRows: a bulk write's request (100 rows of one
// 100-byte SetCell), decoded by hand and by protobuf; one op is one request.
//
//	go test -run '^$' -bench DecodeMutateRows -benchmem ./server
func BenchmarkDecodeMutateRows(b *testing.B) {
	b.StopTimer()
	b.ReportAllocs()
	var req *btpb.MutateRowsRequest
	for _, c := range mutateRowsCases() {
		if c.name == "bulk" {
			req = c.req
		}
	}
	enc, err := proto.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("hand", func(b *testing.B) {
		for b.Loop() {
			var r btpb.MutateRowsRequest
			if !decodeMutateRows(enc, &r) {
				b.Fatal("declined")
			}
		}
	})
	b.Run("protobuf", func(b *testing.B) {
		for b.Loop() {
			var r btpb.MutateRowsRequest
			if err := proto.Unmarshal(enc, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// setCellMutation is a SetCell mutation of family fam, column q, value v
// at timestamp ts.
func setCellMutation(fam string, q, v []byte, ts int64) *btpb.Mutation {
	return &btpb.Mutation{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{
		FamilyName: fam, ColumnQualifier: q, Value: v, TimestampMicros: ts}}}
}

// TestField: field reads what protowire reads — the tag, then a
// length-delimited field's contents or a varint — or fails where it
// fails, on random fields: one- and two-byte tags of every wire type,
// lengths of one to three bytes (non-minimal ones too) up to 20,000,
// varints of one to ten bytes, and every prefix of each.
func TestField(t *testing.T) {
	want := func(b []byte) (num protowire.Number, typ protowire.Type, v []byte, x uint64, n int) {
		num, typ, n = protowire.ConsumeTag(b)
		if n < 0 {
			return 0, 0, nil, 0, -1
		}
		switch typ {
		case protowire.BytesType:
			v, m := protowire.ConsumeBytes(b[n:])
			if m < 0 {
				return 0, 0, nil, 0, -1
			}
			return num, typ, v, 0, n + m
		case protowire.VarintType:
			x, m := protowire.ConsumeVarint(b[n:])
			if m < 0 {
				return 0, 0, nil, 0, -1
			}
			return num, typ, nil, x, n + m
		}
		return 0, 0, nil, 0, -1
	}
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 20000 {
		var b []byte
		num := protowire.Number(r.IntN(16))
		if i%10 == 0 {
			num = protowire.Number(16 + r.IntN(1000)) // a two-byte tag
		}
		typ := []protowire.Type{protowire.VarintType, protowire.BytesType, protowire.BytesType, protowire.Fixed64Type, protowire.StartGroupType}[r.IntN(5)]
		b = protowire.AppendTag(b, num, typ)
		switch typ {
		case protowire.BytesType:
			l := []int{r.IntN(128), 128 + r.IntN(16384-128), r.IntN(20000)}[r.IntN(3)]
			b = protowire.AppendVarint(b, uint64(l))
			if r.IntN(8) == 0 { // the length non-minimal: one more byte
				b[len(b)-1] |= 0x80
				b = append(b, 0)
			}
			b = append(b, make([]byte, l)...)
			for j := len(b) - l; j < len(b); j++ {
				b[j] = byte(r.Uint32())
			}
		case protowire.VarintType:
			b = protowire.AppendVarint(b, r.Uint64()>>r.IntN(64))
		default:
			b = append(b, 1, 2, 3, 4, 5, 6, 7, 8)
		}
		b = append(b, 0xa, 0x1, 0x2) // another field after it
		for _, c := range []int{len(b), len(b) - 3, r.IntN(len(b) + 1), 1, 2, 3} {
			in := b[:min(c, len(b))]
			gn, gt, gv, gx, gk := field(in)
			wn, wt, wv, wx, wk := want(in)
			if (gk < 0) != (wk < 0) || gk >= 0 && (gn != wn || gt != wt || string(gv) != string(wv) || gx != wx || gk != wk) {
				t.Fatalf("field(%x) = %d %d %x %d %d, protowire reads %d %d %x %d %d", in, gn, gt, gv, gx, gk, wn, wt, wv, wx, wk)
			}
		}
	}
}
