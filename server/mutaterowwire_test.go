package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// checkMutateRowWire is checkMutateRowsWire for a single-row write: if
// stashMutateRow keeps b, proto.Unmarshal accepts it, the request's names
// and row key are protobuf's, and the one entry the engine reads from the
// bytes is exactly what the message path hands it. A request left to
// protobuf is untouched. It reports whether b was kept.
func checkMutateRowWire(t *testing.T, b []byte, exp expiry) bool {
	t.Helper()
	var got btpb.MutateRowRequest
	w := stashMutateRow(b, &got)
	if w == nil {
		if !proto.Equal(&got, &btpb.MutateRowRequest{}) {
			t.Fatalf("declined but changed the request: %v", &got)
		}
		return false
	}
	var want btpb.MutateRowRequest
	if err := proto.Unmarshal(b, &want); err != nil {
		t.Fatalf("kept what protobuf refuses (%v)", err)
	}
	if got.TableName != want.TableName || got.AppProfileId != want.AppProfileId || got.AuthorizedViewName != want.AuthorizedViewName ||
		string(got.RowKey) != string(want.RowKey) || got.Mutations != nil || got.Idempotency != nil {
		t.Fatalf("names %q %q %q, row %q (mutations %d), want %q %q %q, row %q", got.TableName, got.AppProfileId, got.AuthorizedViewName, got.RowKey,
			len(got.Mutations), want.TableName, want.AppProfileId, want.AuthorizedViewName, want.RowKey)
	}
	if w.Len() != 1 {
		t.Fatalf("kept a single-row write as %d entries", w.Len())
	}
	checkWireEntries(t, w, []*btpb.MutateRowsRequest_Entry{{RowKey: want.RowKey, Mutations: want.Mutations}}, exp)
	// A handler that needs the messages gets protobuf's.
	w.decodeRowInto(&got)
	if !proto.Equal(&got, &want) {
		t.Fatalf("decodeRowInto gave\n%v\nwant\n%v", &got, &want)
	}
	return true
}

// mutateRowCases are single-row writes the codec keeps as bytes (kept:
// true) or leaves to protobuf.
func mutateRowCases() []struct {
	name string
	req  *btpb.MutateRowRequest
	kept bool
} {
	set := setCellMutation
	apply := &btpb.MutateRowRequest{TableName: "projects/p/instances/i/tables/t", AppProfileId: "default", RowKey: []byte("row\x00\xff"),
		Mutations: []*btpb.Mutation{set("f", []byte("c"), make([]byte, 100), -1)}}
	many := &btpb.MutateRowRequest{TableName: "t", AuthorizedViewName: "v", RowKey: []byte("a"), Mutations: []*btpb.Mutation{
		set("f", []byte("q1"), []byte("v1"), -1),
		set("g", nil, nil, 0),
		set("f", []byte{}, []byte{}, 1<<62),
		{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{}}, TimestampOrigin: 2},
	}}
	del := &btpb.MutateRowRequest{TableName: "t", RowKey: []byte("a"), Mutations: []*btpb.Mutation{set("f", nil, nil, 1),
		{Mutation: &btpb.Mutation_DeleteFromRow_{DeleteFromRow: &btpb.Mutation_DeleteFromRow{}}}}}
	idem := &btpb.MutateRowRequest{TableName: "t", RowKey: []byte("a"), Mutations: []*btpb.Mutation{set("f", nil, nil, 1)},
		Idempotency: &btpb.Idempotency{Token: []byte("tok")}}
	empty := &btpb.MutateRowRequest{TableName: "t", RowKey: []byte("a"), Mutations: []*btpb.Mutation{{}}}
	return []struct {
		name string
		req  *btpb.MutateRowRequest
		kept bool
	}{
		{"nothing", &btpb.MutateRowRequest{}, true},
		{"apply", apply, true},
		{"many shapes", many, true},
		{"no mutations", &btpb.MutateRowRequest{TableName: "t", RowKey: []byte("a")}, true},
		{"a delete", del, false},
		{"idempotency", idem, false},
		{"an empty mutation", empty, false},
	}
}

// mutateRowOddities are single-row writes protobuf accepts that a client
// seldom sends (wireOddities' shapes): fields given twice, out of order,
// the row key after the mutations, varints at their extremes; and what the
// codec must leave to protobuf: bad UTF-8 in a family or a name, an
// unknown field, a doubled set_cell, a broken encoding.
func mutateRowOddities() (kept, declined [][]byte) {
	str, msg, vint := wireStr, wireMsg, wireVarint
	setCell := func(fam, q, v string, ts uint64) []byte {
		return str(vint(str(str(nil, 1, fam), 2, q), 3, ts), 4, v)
	}
	mut := func(sc []byte) []byte { return msg(nil, 3, msg(nil, 1, sc)) }
	req := str(nil, 4, "profile")
	req = append(req, mut(setCell("f", "q", "v", 1000))...)
	req = str(req, 2, "row1")
	req = str(req, 1, "t1")
	req = msg(req, 3, msg(vint(nil, 7, 1<<40), 1, setCell("f", "", "", 1<<63)))
	req = str(req, 6, "")
	req = str(req, 1, "t2")
	req = str(req, 2, "row2")
	req = append(req, mut(setCell("g", "", string(make([]byte, 300)), 1<<64-1))...)
	good := str(mut(setCell("f", "q", "v", 0)), 2, "r")
	kept = [][]byte{req, good, str(nil, 2, "r"), mut(nil)}
	declined = [][]byte{
		str(mut(setCell("\xff", "q", "v", 0)), 2, "r"),
		str(good, 1, "t\xfe"),
		str(good, 9, "x"),
		msg(good, 3, append(msg(nil, 1, nil), msg(nil, 1, nil)...)),
		good[:len(good)-1],
		{0x12, 0x00, 0x08},
	}
	return kept, declined
}

// wireStr, wireMsg and wireVarint append field num holding s, the message m
// or the varint x to b.
func wireStr(b []byte, num protowire.Number, s string) []byte {
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
}

func wireMsg(b []byte, num protowire.Number, m []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), m)
}

func wireVarint(b []byte, num protowire.Number, x uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), x)
}

// TestMutateRowWire: the cases and oddities through checkMutateRowWire, and
// the cases' encodings with bytes changed at random; an Apply's request is
// kept as bytes.
func TestMutateRowWire(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	exps := []expiry{{}, {ttl: 5000}, {at: 1 << 40}}
	kept := 0
	for _, c := range mutateRowCases() {
		b, err := proto.Marshal(c.req)
		if err != nil {
			t.Fatal(err)
		}
		if k := checkMutateRowWire(t, b, exps[0]); k != c.kept {
			t.Fatalf("%s: kept %v, want %v", c.name, k, c.kept)
		}
		for range 2000 {
			if len(b) == 0 {
				break
			}
			bad := append([]byte{}, b...)
			for range 1 + r.IntN(3) {
				bad[r.IntN(len(bad))] = byte(r.Uint32())
			}
			if checkMutateRowWire(t, bad, exps[r.IntN(len(exps))]) {
				kept++
			}
		}
	}
	if kept == 0 {
		t.Fatal("no corrupted encoding was kept: the check checked nothing")
	}
	keep, decline := mutateRowOddities()
	for i, b := range keep {
		if !checkMutateRowWire(t, b, exps[1]) {
			t.Fatalf("oddity %d was not kept as bytes", i)
		}
	}
	for i, b := range decline {
		if checkMutateRowWire(t, b, exps[1]) {
			t.Fatalf("declined oddity %d was kept as bytes", i)
		}
	}
}

// FuzzMutateRowWire: on any input the codec either leaves a single-row
// write to protobuf or keeps bytes from which the engine reads what the
// message path gives it. The seeds (run by every go test) are the cases and
// the oddities.
func FuzzMutateRowWire(f *testing.F) {
	for _, c := range mutateRowCases() {
		b, _ := proto.Marshal(c.req)
		f.Add(b, int64(0))
	}
	keep, decline := mutateRowOddities()
	for _, b := range append(keep, decline...) {
		f.Add(b, int64(2000))
	}
	f.Fuzz(func(t *testing.T, b []byte, ttl int64) {
		checkMutateRowWire(t, b, expiry{ttl: ttl})
	})
}

// rawCodec sends a request's bytes as they are (the tests' malformed
// encodings) and drops the answer's.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)   { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(_ []byte, _ any) error { return nil }
func (rawCodec) Name() string                    { return "proto" }

// randomMutateRow is the encoding of a random single-row write to table,
// valid or not: empty, long and doubled row keys; unknown, empty and
// non-UTF-8 family names; long qualifiers; negative, sub-millisecond,
// past-9999, client-generated and server timestamps; no mutations, an
// empty mutation, a delete, an unknown field, an idempotency token, bad
// UTF-8 in a name, and now and then a changed or cut byte.
func randomMutateRow(r *rand.Rand, table string, i int) []byte {
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	str, msg, vint := wireStr, wireMsg, wireVarint
	b := str(nil, 1, table)
	if p := pick("", "default", "none"); p != "none" {
		b = str(b, 4, p)
	}
	// Mostly valid choices, so that a good share of the writes is written.
	if r.IntN(20) > 0 {
		b = str(b, 2, pick("r1", "r2", "r3", "r4", "r5", "", strings.Repeat("k", 4097)))
	}
	n := 1 + r.IntN(3)
	if r.IntN(10) == 0 {
		n = 0
	}
	for range n {
		var m []byte
		switch r.IntN(30) {
		case 0:
			m = msg(nil, 4, nil) // delete_from_row
		case 1: // an empty mutation
		default:
			ts := uint64(r.IntN(1000)) * 1000
			if r.IntN(4) == 0 {
				ts = []uint64{1<<64 - 1, 0, 1001, 1<<64 - 5, 253402300800000000, 253402300799999000, 1 << 63}[r.IntN(7)]
			}
			fam := pick("cf", "cg")
			if r.IntN(5) == 0 {
				fam = pick("nope", "", "c\xff")
			}
			sc := str(nil, 1, fam)
			if q := pick("", "q", "q2", "q3", "q4", strings.Repeat("q", 16<<10+1)); q != "" {
				sc = str(sc, 2, q)
			}
			sc = vint(sc, 3, ts)
			if v := pick("", "v", fmt.Sprint(i)); v != "" {
				sc = str(sc, 4, v)
			}
			m = msg(nil, 1, sc)
			if r.IntN(3) == 0 {
				m = vint(m, 7, uint64(r.IntN(4)))
			}
		}
		b = msg(b, 3, m)
	}
	switch r.IntN(20) {
	case 0:
		b = str(b, 9, "unknown")
	case 1:
		b = msg(b, 8, str(nil, 1, "token"))
	case 2:
		b = str(b, 6, "")
	case 3:
		b = str(b, 4, "p\xfe")
	case 4:
		b = str(b, 2, "r4") // a second row key: the last wins
	case 5:
		b = b[:r.IntN(len(b))]
	case 6:
		if n := len(table) + 2; len(b) > n {
			b[n+r.IntN(len(b)-n)] = byte(r.Uint32())
		}
	}
	return b
}

// TestMutateRowWireMatchesMessages is the byte-level differential test of
// the single-row write: random encodings (randomMutateRow) sent over gRPC
// as bytes to table wirea — the codec keeps what it can, the engine writes
// from the bytes — and the same bytes decoded by protobuf and handed as a
// message to the handler for table wireb (the message path; a request
// protobuf refuses is gRPC's unmarshal error). Every status (code and
// message) and, at the end, every cell of the two tables must be the same,
// and no request's bytes are left held.
func TestMutateRowWireMatchesMessages(t *testing.T) {
	t.Parallel()
	env, d := newWireTwins(t)
	conn, err := grpc.NewClient(env.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r := rand.New(rand.NewPCG(9, 10))
	kept, ok := 0, 0
	for i := range 400 {
		b := randomMutateRow(r, tableName("wirea"), i)
		if stashMutateRow(b, &btpb.MutateRowRequest{}) != nil {
			kept++
		}
		var out []byte
		gotErr := conn.Invoke(context.Background(), "/google.bigtable.v2.Bigtable/MutateRow", &b, &out, grpc.ForceCodec(rawCodec{}))
		var wantErr error
		var msg btpb.MutateRowRequest
		if err := proto.Unmarshal(b, &msg); err != nil {
			wantErr = status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
		} else {
			msg.TableName = strings.ReplaceAll(msg.TableName, "wirea", "wireb")
			_, wantErr = d.MutateRow(context.Background(), &msg)
		}
		g, w := fmt.Sprint(status.Convert(gotErr)), strings.ReplaceAll(fmt.Sprint(status.Convert(wantErr)), "wireb", "wirea")
		if gotErr == nil && wantErr == nil {
			ok++
		} else if g != w {
			t.Fatalf("request %d (%x): status %v, the message path %v", i, b, g, w)
		}
	}
	t.Logf("%d of 400 requests kept as bytes, %d written", kept, ok)
	if kept < 100 || ok < 50 {
		t.Fatalf("of 400 requests %d were kept as bytes and %d written: the test tests too little", kept, ok)
	}
	checkWireTwins(t, env)
}

// TestMutateRowApplyMatchesMessages: random single-row writes through the
// official client's Apply (SetCells valid and not, now and then with a
// delete, which takes the message path) to table wirea, and the same
// request handed as a message to the handler for table wireb. Every
// answer and, at the end, every cell must be the same.
func TestMutateRowApplyMatchesMessages(t *testing.T) {
	t.Parallel()
	env, d := newWireTwins(t)
	ta := env.client.Open("wirea")
	r := rand.New(rand.NewPCG(11, 12))
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	written := 0
	for i := range 200 {
		row := pick("", "r1", "r2", "r3", "r4", strings.Repeat("k", 4097))
		m := bigtable.NewMutation()
		req := &btpb.MutateRowRequest{TableName: tableName("wireb"), RowKey: []byte(row)}
		for range r.IntN(4) {
			if r.IntN(10) == 0 {
				m.DeleteRow()
				req.Mutations = append(req.Mutations, &btpb.Mutation{Mutation: &btpb.Mutation_DeleteFromRow_{DeleteFromRow: &btpb.Mutation_DeleteFromRow{}}})
				continue
			}
			fam, col, val := pick("cf", "cg", "cf", "cg", "nope", ""), pick("", "q", "q2", strings.Repeat("q", 16<<10+1)), pick("", "v", fmt.Sprint(i))
			ts := []int64{-1, 0, 1000, 1001, -5, -5000, 253402300800000000, int64(r.IntN(1000)) * 1000}[r.IntN(8)]
			m.Set(fam, col, bigtable.Timestamp(ts), []byte(val))
			ts = int64(bigtable.Timestamp(ts).TruncateToMilliseconds()) // as the client sends it
			var q, v []byte
			if col != "" {
				q = []byte(col)
			}
			if val != "" {
				v = []byte(val)
			}
			req.Mutations = append(req.Mutations, &btpb.Mutation{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{
				FamilyName: fam, ColumnQualifier: q, TimestampMicros: ts, Value: v}}})
		}
		if len(req.Mutations) == 0 {
			// The client refuses an empty mutation itself; the server's
			// answer to none is the byte-level test's.
			continue
		}
		gotErr := ta.Apply(context.Background(), row, m)
		_, wantErr := d.MutateRow(context.Background(), req)
		g, w := fmt.Sprint(status.Convert(gotErr)), strings.ReplaceAll(fmt.Sprint(status.Convert(wantErr)), "wireb", "wirea")
		if gotErr == nil && wantErr == nil {
			written++
		} else if g != w {
			t.Fatalf("write %d: %v, the message path %v", i, g, w)
		}
	}
	t.Logf("%d of 200 writes written", written)
	if written < 20 {
		t.Fatalf("only %d of 200 writes succeeded", written)
	}
	checkWireTwins(t, env)
}

// BenchmarkMutateRowPaths: one single-row write (one 100-byte SetCell, as
// Table.Apply sends it) from its bytes to the engine's commit, through the
// message path (protobuf, then the handler) and the wire path (the codec
// keeps the bytes, the engine reads them); one op is one request. The
// commit's durable wait dominates the time; the allocations tell the paths
// apart.
//
//	go test -run '^$' -bench MutateRowPaths -benchmem ./server
func BenchmarkMutateRowPaths(b *testing.B) {
	srv, d := benchWriteServer(b)
	req := &btpb.MutateRowRequest{TableName: tableName("bench"), RowKey: []byte("row000001"),
		Mutations: []*btpb.Mutation{{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{
			FamilyName: "f", ColumnQualifier: []byte("c"), TimestampMicros: 1000, Value: make([]byte, 100)}}}}}
	enc, _ := proto.Marshal(req)
	ctx := context.Background()
	b.Run("message", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r btpb.MutateRowRequest
			if err := proto.Unmarshal(enc, &r); err != nil {
				b.Fatal(err)
			}
			if _, err := d.MutateRow(ctx, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r btpb.MutateRowRequest
			w := stashMutateRow(append([]byte(nil), enc...), &r)
			srv.sec.wire.put(&r, w)
			if _, err := d.MutateRow(ctx, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestMutateRowServedFromBytes: an Apply's request reaches the engine from
// its bytes, not only as the same cells: the server's codec keeps it (the
// differential tests above pass with the path turned off, both sides then
// being the message path), and the handler writes it without decoding its
// mutations into the request.
func TestMutateRowServedFromBytes(t *testing.T) {
	t.Parallel()
	env, d := newWireTwins(t)
	var req btpb.MutateRowRequest
	keepByCodec(t, env, &btpb.MutateRowRequest{TableName: tableName("wirea"), RowKey: []byte("r"),
		Mutations: []*btpb.Mutation{setCellMutation("cf", []byte("q"), []byte("v"), 1000)}}, &req)
	if _, err := d.MutateRow(context.Background(), &req); err != nil {
		t.Fatal(err)
	}
	if req.Mutations != nil {
		t.Fatalf("the handler decoded the kept request's mutations (%d): it took the message path", len(req.Mutations))
	}
	checkWrittenFromBytes(t, env, "r", "cf:q")
}

// TestMutateRowsServedFromBytes is the same for a bulk write: the codec
// keeps it, and the handler writes it without decoding its entries.
func TestMutateRowsServedFromBytes(t *testing.T) {
	t.Parallel()
	env, d := newWireTwins(t)
	var req btpb.MutateRowsRequest
	keepByCodec(t, env, &btpb.MutateRowsRequest{TableName: tableName("wirea"), Entries: []*btpb.MutateRowsRequest_Entry{
		{RowKey: []byte("r1"), Mutations: []*btpb.Mutation{setCellMutation("cf", []byte("q1"), []byte("v"), 1000)}},
		{RowKey: []byte("r2"), Mutations: []*btpb.Mutation{setCellMutation("cf", []byte("q2"), []byte("v"), 1000)}}}}, &req)
	if err := d.MutateRows(&req, &discardMutateRows{ctx: context.Background()}); err != nil {
		t.Fatal(err)
	}
	if req.Entries != nil {
		t.Fatalf("the handler decoded the kept request's entries (%d): it took the message path", len(req.Entries))
	}
	checkWrittenFromBytes(t, env, "r1", "cf:q1")
	checkWrittenFromBytes(t, env, "r2", "cf:q2")
}

// keepByCodec encodes msg and hands it to the server's codec as gRPC
// would, decoding into req; it fails t unless the codec kept the bytes,
// and leaves them for the handler.
func keepByCodec(t *testing.T, env *testEnv, msg, req proto.Message) {
	t.Helper()
	b, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	if err := newMeteredCodec(env.srv.sec).Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, req); err != nil {
		t.Fatal(err)
	}
	m, _ := env.srv.sec.meters.take(req)
	env.srv.sec.inflight.Add(-m.n)
	w := env.srv.sec.wire.take(req)
	if w == nil {
		t.Fatalf("the server's codec decoded a %T rather than keeping its bytes", req)
	}
	env.srv.sec.wire.put(req, w)
}

// checkWrittenFromBytes fails t unless row of table wirea holds column.
func checkWrittenFromBytes(t *testing.T, env *testEnv, row, column string) {
	t.Helper()
	r, err := env.client.Open("wirea").ReadRow(context.Background(), row)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(r); !strings.Contains(got, column) {
		t.Fatalf("the write from the bytes is not in row %s: %s", row, got)
	}
}
