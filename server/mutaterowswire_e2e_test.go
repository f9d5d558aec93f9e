package server

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// capturedMutateRows is a MutateRows stream served in process: it keeps
// what the handler sends.
type capturedMutateRows struct {
	grpc.ServerStream
	ctx  context.Context
	sent []*btpb.MutateRowsResponse
}

func (c *capturedMutateRows) Context() context.Context { return c.ctx }
func (c *capturedMutateRows) Send(r *btpb.MutateRowsResponse) error {
	c.sent = append(c.sent, proto.Clone(r).(*btpb.MutateRowsResponse))
	return nil
}

// discardMutateRows is a MutateRows stream served in process that drops
// what the handler sends.
type discardMutateRows struct {
	grpc.ServerStream
	ctx context.Context
}

func (c *discardMutateRows) Context() context.Context            { return c.ctx }
func (c *discardMutateRows) Send(*btpb.MutateRowsResponse) error { return nil }

// TestMutateRowsWireMatchesMessages: random bulk writes of SetCells, valid
// and not (empty and long row keys, unknown families, long qualifiers,
// negative, sub-millisecond, client-generated and server timestamps), each
// sent over gRPC to table wirea — the codec keeps it as bytes and the
// engine writes from them — and handed as a message to the handler for
// table wireb (the message path). Every answer (the call's status, each
// entry's) and, at the end, every cell of the two tables must be the same;
// no request's bytes are left held.
func TestMutateRowsWireMatchesMessages(t *testing.T) {
	t.Parallel()
	env, d := newWireTwins(t)
	raw := env.raw(t)
	r := rand.New(rand.NewPCG(5, 6))
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	kept := 0
	for i := range 300 {
		req := &btpb.MutateRowsRequest{AppProfileId: pick("", "default")}
		for range 1 + r.IntN(5) {
			e := &btpb.MutateRowsRequest_Entry{RowKey: []byte(pick("", "r1", "r2", "r3", strings.Repeat("k", 4097)))}
			for range r.IntN(4) {
				ts := []int64{-1, 0, 1000, 1001, 2_000_000, -5, 253402300800000000, int64(r.IntN(1000)) * 1000}[r.IntN(8)]
				q := []byte(pick("", "q", "q2", strings.Repeat("q", 16<<10+1)))
				m := &btpb.Mutation{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{
					FamilyName: pick("cf", "cg", "nope", ""), ColumnQualifier: q, TimestampMicros: ts, Value: []byte(pick("", "v", fmt.Sprint(i)))}}}
				if r.IntN(3) == 0 {
					m.TimestampOrigin = btpb.Mutation_CLIENT_AUTO_GENERATED
				}
				e.Mutations = append(e.Mutations, m)
			}
			req.Entries = append(req.Entries, e)
		}
		req.TableName = tableName("wirea")
		if b, _ := proto.Marshal(req); stashMutateRows(b, &btpb.MutateRowsRequest{}) != nil {
			kept++
		}
		var got []*btpb.MutateRowsResponse
		stream, err := raw.MutateRows(context.Background(), req)
		for err == nil {
			var resp *btpb.MutateRowsResponse
			if resp, err = stream.Recv(); err == nil {
				got = append(got, resp)
			}
		}
		gotErr := status.Convert(err)
		if gotErr.Message() == "EOF" {
			gotErr = nil
		}
		msg := proto.Clone(req).(*btpb.MutateRowsRequest)
		msg.TableName = tableName("wireb")
		c := &capturedMutateRows{ctx: context.Background()}
		wantErr := status.Convert(d.MutateRows(msg, c))
		if fmt.Sprint(gotErr) != strings.ReplaceAll(fmt.Sprint(wantErr), "wireb", "wirea") {
			t.Fatalf("request %d: status %v, the message path %v", i, gotErr, wantErr)
		}
		if g, w := fmt.Sprint(got), strings.ReplaceAll(fmt.Sprint(c.sent), "wireb", "wirea"); g != w {
			t.Fatalf("request %d: answered\n%s\nthe message path\n%s", i, g, w)
		}
	}
	if kept < 100 {
		t.Fatalf("only %d requests of 300 were kept as bytes", kept)
	}
	checkWireTwins(t, env)
}

// newWireTwins starts a server with two tables of families cf and cg:
// wirea, written through gRPC (the wire path where it applies), and wireb,
// written by handing messages to the handler (the message path).
func newWireTwins(t *testing.T) (*testEnv, *dataServer) {
	t.Helper()
	env := newTestEnv(t)
	fams := map[string]bigtable.GCPolicy{"cf": nil, "cg": nil}
	env.createTable(t, "wirea", fams)
	env.createTable(t, "wireb", fams)
	return env, &dataServer{s: env.srv}
}

// checkWireTwins fails t unless the twin tables hold the same cells (and
// enough of them to tell), and no request's bytes are still held.
func checkWireTwins(t *testing.T, env *testEnv) {
	t.Helper()
	cells := func(name string) string {
		return fmt.Sprint(readAll(t, env.client.Open(name), bigtable.InfiniteRange("")))
	}
	if a, b := cells("wirea"), cells("wireb"); a != b || len(a) < 100 {
		t.Fatalf("the tables differ:\n%s\n%s", a, b)
	}
	if n := env.srv.sec.wire.len(); n != 0 {
		t.Fatalf("%d requests' bytes still held", n)
	}
}

// BenchmarkMutateRowsPaths: one bulk write's request (100 rows of one
// 100-byte SetCell) from its bytes to the engine's commit, through the
// message path (the hand decoder, then the handler) and the wire path (the
// codec keeps the bytes, the engine reads them); one op is one request.
//
//	go test -run '^$' -bench MutateRowsPaths -benchmem ./server
func BenchmarkMutateRowsPaths(b *testing.B) {
	srv, d := benchWriteServer(b)
	req := &btpb.MutateRowsRequest{TableName: tableName("bench")}
	for i := range 100 {
		req.Entries = append(req.Entries, &btpb.MutateRowsRequest_Entry{RowKey: []byte(fmt.Sprintf("row%06d", i)),
			Mutations: []*btpb.Mutation{{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{
				FamilyName: "f", ColumnQualifier: []byte("c"), TimestampMicros: 1000, Value: make([]byte, 100)}}}}})
	}
	enc, _ := proto.Marshal(req)
	c := &discardMutateRows{ctx: context.Background()}
	b.Run("message", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r btpb.MutateRowsRequest
			if !decodeMutateRows(enc, &r) {
				b.Fatal("declined")
			}
			if err := d.MutateRows(&r, c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r btpb.MutateRowsRequest
			w := stashMutateRows(append([]byte(nil), enc...), &r)
			srv.sec.wire.put(&r, w)
			if err := d.MutateRows(&r, c); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchWriteServer starts a server with a table "bench" of family f, for
// the write paths' benchmarks.
func benchWriteServer(b *testing.B) (*Server, *dataServer) {
	srv := startServer(b, Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: b.TempDir()})
	_, admin := testkit.Clients(b, srv.Addr(), testProject, testInstance, "")
	if err := admin.CreateTableFromConf(context.Background(), &bigtable.TableConf{TableID: "bench",
		ColumnFamilies: map[string]bigtable.Family{"f": {}}}); err != nil {
		b.Fatal(err)
	}
	return srv, &dataServer{s: srv}
}

// TestMutateRowsWireRefusedLeavesNothing: a bulk or single-row write the
// codec kept as bytes but the call refused before its handler ran (a token
// limited to another instance: PERMISSION_DENIED at the received request)
// leaves no bytes held, nor gRPC's buffer they came in (20 refused bulk
// writes of 2 KiB, each in a pooled buffer: fewer than 10 of the server's
// buffers outstanding after); the same token's write to its own instance
// is served.
func TestMutateRowsWireRefusedLeavesNothing(t *testing.T) {
	t.Parallel()
	tokens, _ := securityFiles(t)
	pool := &poisonPool{out: map[*[]byte]bool{}}
	knobs := &testKnobs{}
	knobs.bufferPool.set(pool)
	srv := startSecure(t, SecurityOptions{TokenFile: tokens}, func(o *Options) { o.knobs = knobs })
	raw := btpb.NewBigtableClient(plainConn(t, srv.Addr()))
	ctx := metadata.AppendToOutgoingContext(context.Background(), bearerMD(tokOther)...)
	req := &btpb.MutateRowsRequest{TableName: tableName("t"), Entries: []*btpb.MutateRowsRequest_Entry{{RowKey: []byte("r"),
		Mutations: []*btpb.Mutation{{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{FamilyName: "f", Value: []byte("v")}}}}}}}
	if b, _ := proto.Marshal(req); stashMutateRows(b, &btpb.MutateRowsRequest{}) == nil {
		t.Fatal("the request would not be kept as bytes: the test tests nothing")
	}
	recv := func() error {
		st, err := raw.MutateRows(ctx, req)
		for err == nil {
			_, err = st.Recv()
		}
		return err
	}
	one := &btpb.MutateRowRequest{TableName: req.TableName, RowKey: req.Entries[0].RowKey, Mutations: req.Entries[0].Mutations}
	if b, _ := proto.Marshal(one); stashMutateRow(b, &btpb.MutateRowRequest{}) == nil {
		t.Fatal("the single-row write would not be kept as bytes: the test tests nothing")
	}
	for range 3 {
		if err := recv(); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("MutateRows on another instance: %v", err)
		}
		if _, err := raw.MutateRow(ctx, one); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("MutateRow on another instance: %v", err)
		}
	}
	big := proto.Clone(req).(*btpb.MutateRowsRequest)
	big.Entries[0].Mutations[0].GetSetCell().Value = make([]byte, 2<<10)
	for range 20 {
		st, err := raw.MutateRows(ctx, big)
		for err == nil {
			_, err = st.Recv()
		}
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("MutateRows of 2 KiB on another instance: %v", err)
		}
	}
	if n := pool.outstanding(); n >= 10 {
		t.Fatalf("%d of the server's buffers outstanding after the calls ended", n)
	}
	req.TableName = "projects/" + testProject + "/instances/other/tables/t"
	one.TableName = req.TableName
	if err := recv(); status.Code(err) != codes.NotFound {
		t.Fatalf("MutateRows on its own instance: %v, want NotFound (past authorization)", err)
	}
	if _, err := raw.MutateRow(ctx, one); status.Code(err) != codes.NotFound {
		t.Fatalf("MutateRow on its own instance: %v, want NotFound (past authorization)", err)
	}
	if n := srv.sec.wire.len(); n != 0 {
		t.Fatalf("%d requests' bytes still held", n)
	}
}

// poisonPool is the server's buffer pool for a test: each buffer put back
// is overwritten (so a read of a request's bytes after their buffer went
// back sees 0xEE, not the request) and the buffers handed out and not yet
// put back are counted.
type poisonPool struct {
	dirtyPool
	mu  sync.Mutex
	out map[*[]byte]bool
}

func (p *poisonPool) Get(n int) *[]byte {
	b := p.dirtyPool.Get(n)
	p.mu.Lock()
	p.out[b] = true
	p.mu.Unlock()
	return b
}

func (p *poisonPool) Put(b *[]byte) {
	p.mu.Lock()
	delete(p.out, b)
	p.mu.Unlock()
	full := (*b)[:cap(*b)]
	for i := range full {
		full[i] = 0xEE
	}
	p.dirtyPool.Put(b)
}

func (p *poisonPool) outstanding() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.out)
}

// TestMutateRowsHeldBuffer: a bulk write that came in one buffer is
// written from gRPC's own buffer, held until the call ends. 200 bulk
// writes of 100 rows (each request one HTTP/2 frame), from four writers,
// through a pool that poisons every buffer put back: every cell reads
// back as written (no byte was read after its buffer went back), and the
// buffers held are given back (fewer than 20 outstanding after 250
// calls), as they are for a call its handler refuses.
func TestMutateRowsHeldBuffer(t *testing.T) {
	t.Parallel()
	pool := &poisonPool{out: map[*[]byte]bool{}}
	knobs := &testKnobs{}
	knobs.bufferPool.set(pool)
	env := newTestEnv(t, func(o *Options) { o.knobs = knobs })
	tbl := env.createTable(t, "held", map[string]bigtable.GCPolicy{"cf": nil})
	const writers, calls, rows = 4, 50, 100
	writeHeldRows(t, tbl, writers, calls, rows)
	got := readAll(t, tbl, bigtable.InfiniteRange(""))
	if len(got) != writers*calls*rows {
		t.Fatalf("%d rows read back, want %d", len(got), writers*calls*rows)
	}
	for _, r := range got {
		cells := r["cf"]
		if len(cells) != 1 || cells[0].Column != "cf:q" || cells[0].Timestamp != 1000 || !bytes.Equal(cells[0].Value, heldValue(r.Key())) {
			t.Fatalf("row %q reads back as %v", r.Key(), cells)
		}
	}
	// A call its handler refuses (no such table) gives its buffer back too.
	missing := env.client.Open("missing")
	keys := make([]string, rows)
	muts := make([]*bigtable.Mutation, rows)
	for i := range rows {
		keys[i] = fmt.Sprintf("r%03d", i)
		muts[i] = bigtable.NewMutation()
		muts[i].Set("cf", "q", 1000, heldValue(keys[i]))
	}
	for range 50 {
		if _, err := missing.ApplyBulk(context.Background(), keys, muts); status.Code(err) != codes.NotFound {
			t.Fatalf("ApplyBulk to a missing table: %v", err)
		}
	}
	if n := pool.outstanding(); n >= 20 {
		t.Fatalf("%d of the server's buffers outstanding after the calls ended", n)
	}
	if n := env.srv.sec.wire.len(); n != 0 {
		t.Fatalf("%d requests' bytes still held", n)
	}
}

// heldValue is the 100-byte value writeHeldRows writes to row.
func heldValue(row string) []byte { return []byte(strings.Repeat(row, 10)) }

// writeHeldRows writes calls bulk writes of rows rows (cf:q at 1000, each
// row's value heldValue) from each of writers writers, and fails t on any
// error.
func writeHeldRows(t *testing.T, tbl *bigtable.Table, writers, calls, rows int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for c := range calls {
				keys := make([]string, rows)
				muts := make([]*bigtable.Mutation, rows)
				for i := range rows {
					keys[i] = fmt.Sprintf("w%dc%02dr%03d", w, c, i)
					muts[i] = bigtable.NewMutation()
					muts[i].Set("cf", "q", 1000, heldValue(keys[i]))
				}
				rerrs, err := tbl.ApplyBulk(context.Background(), keys, muts)
				if err == nil && rerrs != nil {
					err = fmt.Errorf("entry errors: %v", rerrs)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestMutateRowsHeldBufferChangeStream: bulk writes served from gRPC's
// own buffer to a table with a change stream record every cell in it as
// written, through a pool that poisons every buffer put back: a change
// record keeping a slice of the request's bytes past its call (rather than
// a copy) would read back as the pool's 0xEE. 2 writers, 20 calls of 100
// rows each.
func TestMutateRowsHeldBufferChangeStream(t *testing.T) {
	t.Parallel()
	pool := &poisonPool{out: map[*[]byte]bool{}}
	knobs := &testKnobs{}
	knobs.bufferPool.set(pool)
	env := newTestEnv(t, func(o *Options) { o.knobs = knobs })
	start := env.clock.Now()
	tbl := env.streamedTable(t, "heldcs", map[string]bigtable.GCPolicy{"cf": nil})
	const writers, calls, rows = 2, 20, 100
	writeHeldRows(t, tbl, writers, calls, rows)
	changes, err := readStream(t, env.raw(t), &btpb.ReadChangeStreamRequest{
		TableName: tableName("heldcs"), Partition: wholeTable(), EndTime: env.endTime(),
		StartFrom: &btpb.ReadChangeStreamRequest_StartTime{StartTime: timestamppb.New(start)},
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, dc := range changes {
		row := string(dc.GetRowKey())
		for _, ch := range dc.GetChunks() {
			set := ch.GetMutation().GetSetCell()
			if set.GetFamilyName() != "cf" || string(set.GetColumnQualifier()) != "q" || set.GetTimestampMicros() != 1000 ||
				!bytes.Equal(set.GetValue(), heldValue(row)) || seen[row] {
				t.Fatalf("change of row %q: %v (seen before: %v)", row, ch.GetMutation(), seen[row])
			}
			seen[row] = true
		}
	}
	if len(seen) != writers*calls*rows {
		t.Fatalf("%d rows' changes read back, want %d", len(seen), writers*calls*rows)
	}
}

// TestMutateRowsStreamEndsBadlyReleases: a bulk write whose call fails in
// gRPC's own read after the codec took its request — the read for the
// end of the requests of a call that takes one (MutateRows) — counts
// nothing in flight and holds no bytes nor gRPC buffer after: a client
// that sends a second request (INTERNAL, cardinality violation), and one
// that sends its request and goes away without ending its requests. Each
// held a pooled buffer, a stash entry, a meter and the request's bytes in
// flight for good (the bytes in flight, at --max-inflight-bytes, refuse
// every later call).
func TestMutateRowsStreamEndsBadlyReleases(t *testing.T) {
	t.Parallel()
	pool := &poisonPool{out: map[*[]byte]bool{}}
	knobs := &testKnobs{}
	knobs.bufferPool.set(pool)
	env := newTestEnv(t, func(o *Options) { o.knobs = knobs })
	env.createTable(t, "t", map[string]bigtable.GCPolicy{"cf": nil})
	conn := plainConn(t, env.srv.Addr())
	req := &btpb.MutateRowsRequest{TableName: tableName("t"), Entries: []*btpb.MutateRowsRequest_Entry{{RowKey: []byte("r"),
		Mutations: []*btpb.Mutation{setCellMutation("cf", []byte("q"), make([]byte, 2<<10), 1000)}}}}
	desc := &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}
	const method = "/google.bigtable.v2.Bigtable/MutateRows"
	clean := func() (bool, string) {
		env.srv.sec.meters.mu.Lock()
		meters := len(env.srv.sec.meters.m)
		env.srv.sec.meters.mu.Unlock()
		held, inflight, out := env.srv.sec.wire.len(), env.srv.sec.inflight.Load(), pool.outstanding()
		return held == 0 && meters == 0 && inflight == 0 && out < 10,
			fmt.Sprintf("%d requests' bytes held, %d meters, %d bytes in flight, %d of the server's buffers outstanding", held, meters, inflight, out)
	}
	for range 20 {
		st, err := conn.NewStream(context.Background(), desc, method)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := st.SendMsg(req); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		var resp btpb.MutateRowsResponse
		if err := st.RecvMsg(&resp); status.Code(err) != codes.Internal {
			t.Fatalf("MutateRows of two requests: %v, want INTERNAL", err)
		}
	}
	eventually(t, "nothing held after 20 calls of two requests", clean)
	for range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		st, err := conn.NewStream(ctx, desc, method)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SendMsg(req); err != nil {
			t.Fatal(err)
		}
		// The codec took the request; the call waits for its end.
		waitFor(t, "the request taken", func() bool { return env.srv.sec.wire.len() == 1 })
		cancel()
		eventually(t, "nothing held after a call cancelled before its requests ended", clean)
	}
}
