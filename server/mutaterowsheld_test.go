package server

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// TestMutateRowsHeldCountsCapacity: a bulk write kept in gRPC's received
// buffer counts in flight what it holds — the buffer's capacity from the
// request on, a pooled 4 KiB for a request of 2.1 KB — not the request's
// length, and gives it back once when its call ends (nothing in flight
// after). Under a bound that takes the request's length but not the
// buffer's capacity, the request is copied instead: its length is
// counted and the buffer goes back at once.
func TestMutateRowsHeldCountsCapacity(t *testing.T) {
	t.Parallel()
	req := &btpb.MutateRowsRequest{TableName: tableName("t"), Entries: []*btpb.MutateRowsRequest_Entry{{RowKey: []byte("r"),
		Mutations: []*btpb.Mutation{setCellMutation("cf", []byte("q"), bytes.Repeat([]byte("v"), 2<<10), 1000)}}}}
	enc, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		bound int64 // --max-inflight-bytes; 0: the default
		held  bool
	}{{"held", 0, true}, {"copied", 3000, false}} {
		t.Run(c.name, func(t *testing.T) {
			pool := &poisonPool{out: map[*[]byte]bool{}}
			knobs := &testKnobs{}
			knobs.bufferPool.set(pool)
			env := newTestEnv(t, func(o *Options) { o.knobs = knobs; o.Security.MaxInflightBytes = c.bound })
			env.createTable(t, "t", map[string]bigtable.GCPolicy{"cf": nil})
			conn := plainConn(t, env.srv.Addr())
			ctx, cancel := context.WithCancel(context.Background())
			st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/google.bigtable.v2.Bigtable/MutateRows")
			if err != nil {
				t.Fatal(err)
			}
			if err := st.SendMsg(req); err != nil {
				t.Fatal(err)
			}
			// The codec took the request; the call waits for the end of
			// its requests, which does not come.
			waitFor(t, "the request taken", func() bool { return env.srv.sec.wire.len() == 1 })
			// The server's buffer the request lies in, and where in it.
			var in *[]byte
			at := -1
			pool.mu.Lock()
			for b := range pool.out {
				if i := bytes.Index(*b, enc); i >= 0 {
					in, at = b, i
				}
			}
			pool.mu.Unlock()
			want := int64(len(enc))
			if c.held {
				if in == nil {
					t.Fatal("no buffer of the server's holds the request")
				}
				if want = int64(cap(*in) - at); want <= int64(len(enc)) {
					t.Fatalf("the request's buffer: %d bytes from the request on, the request %d: the test tests nothing", want, len(enc))
				}
			} else if in != nil {
				t.Fatalf("a buffer of %d bytes still holds the request under a bound of %d", cap(*in), c.bound)
			}
			if got := env.srv.sec.inflight.Load(); got != want {
				t.Errorf("%d bytes in flight for a %d-byte request, want %d", got, len(enc), want)
			}
			cancel()
			eventually(t, "nothing in flight after the call", func() (bool, string) {
				n := env.srv.sec.inflight.Load()
				return n == 0 && env.srv.sec.wire.len() == 0, fmt.Sprintf("%d bytes in flight, %d requests held", n, env.srv.sec.wire.len())
			})
		})
	}
}

// TestMutateRowsHeldBufferMaterializedView: bulk writes served from gRPC's
// own buffer, through a pool that poisons every buffer put back, to a
// table a materialized view is maintained over (grouping by the cell's
// value, so each of the view's keys is one written value): the view,
// brought up to date only after every call ended (its background
// maintainer stopped), has one key per row written, each the value as
// written and counted once. A view-log entry, or anything the maintainer
// reads, keeping a slice of the request's bytes past its call rather than
// a copy would read back as the pool's 0xEE. 2 writers, 10 calls of 100
// rows each.
func TestMutateRowsHeldBufferMaterializedView(t *testing.T) {
	t.Parallel()
	pool := &poisonPool{out: map[*[]byte]bool{}}
	knobs := &testKnobs{}
	knobs.bufferPool.set(pool)
	env := newTestEnv(t, func(o *Options) { o.knobs = knobs })
	ctx := context.Background()
	tbl := env.createTable(t, "heldmv", map[string]bigtable.GCPolicy{"cf": nil})
	iac := testkit.InstanceAdmin(t, env.srv.Addr(), testProject)
	if err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: "mv",
		Query: "SELECT cf['q'] AS _key, COUNT(cf['q']) AS n FROM heldmv GROUP BY cf['q']"}); err != nil {
		t.Fatal(err)
	}
	view := env.client.OpenMaterializedView("mv")
	// Built (empty) by a read, then maintained only when read, after every
	// write's buffer went back: from its log, not built again from the
	// table.
	if err := view.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		t.Errorf("the empty table's view has row %q", r.Key())
		return true
	}); err != nil {
		t.Fatal(err)
	}
	env.srv.mviews.stopMaint()
	const writers, calls, rows = 2, 10, 100
	writeHeldRows(t, tbl, writers, calls, rows)
	var want []string
	for w := range writers {
		for c := range calls {
			for i := range rows {
				want = append(want, string(heldValue(fmt.Sprintf("w%dc%02dr%03d", w, c, i))))
			}
		}
	}
	slices.Sort(want)
	var got []string
	if err := view.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		got = append(got, r.Key())
		// Each value counted once: n, an 8-byte big-endian 1.
		if i := slices.IndexFunc(r["default"], func(c bigtable.ReadItem) bool { return c.Column == "default:n" }); i < 0 ||
			!bytes.Equal(r["default"][i].Value, []byte{0, 0, 0, 0, 0, 0, 0, 1}) {
			t.Errorf("view row %q: %v, want n = 1", r.Key(), r)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		first := "none"
		if i < len(got) {
			first = fmt.Sprintf("%q", got[i])
		}
		t.Fatalf("the view has %d keys, want %d; the first that differs (at %d): %s, want %q", len(got), len(want), i, first, want[min(i, len(want)-1)])
	}
}

// TestMutateRowsHeldBufferCluster: bulk writes in cluster mode, through a
// pool that poisons every buffer put back on both nodes, each call's rows
// split between a tablet the node called owns and one the other node owns
// (forwarded to it): cluster mode decodes the request and gives gRPC's
// buffer back before it groups and forwards the entries, so every cell,
// local or forwarded, reads back as written only if the decoding copied
// what it keeps. 20 calls of 100 rows.
func TestMutateRowsHeldBufferCluster(t *testing.T) {
	t.Parallel()
	pool := &poisonPool{out: map[*[]byte]bool{}}
	sc := startScaleClusterTuned(t, 0, func(o *Options) { o.knobs.bufferPool.set(pool) }, "n1", "n2")
	ctx := context.Background()
	n1 := sc.nodes["n1"]
	if err := n1.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "held", SplitKeys: []string{"r050"},
		ColumnFamilies: map[string]bigtable.Family{"cf": {}}}); err != nil {
		t.Fatal(err)
	}
	name := "projects/" + testProject + "/instances/" + testInstance + "/tables/held"
	tabs, err := n1.ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: name})
	if err != nil || len(tabs.Tablets) != 2 {
		t.Fatalf("tablets: %v %v", tabs, err)
	}
	// The first tablet on n1, the second on n2.
	for i, to := range []string{"n1", "n2"} {
		if tb := tabs.Tablets[i]; tb.Owner != to {
			if _, err := n1.ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: name, Tablet: tb.Id, To: to}); err != nil {
				t.Fatalf("move tablet %d to %s: %v", i, to, err)
			}
		}
	}
	const calls, rows = 20, 100
	before := testutil.ToFloat64(n1.srv.cluster.forwarded.WithLabelValues("MutateRows"))
	tbl := n1.client.Open("held")
	key := func(c, i int) string { return fmt.Sprintf("r%03dc%02d", i, c) }
	for c := range calls {
		keys := make([]string, rows)
		muts := make([]*bigtable.Mutation, rows)
		for i := range rows {
			keys[i] = key(c, i)
			muts[i] = bigtable.NewMutation()
			muts[i].Set("cf", "q", 1000, heldValue(keys[i]))
		}
		if errs, err := tbl.ApplyBulk(ctx, keys, muts); err != nil || errs != nil {
			t.Fatalf("call %d: %v %v", c, errs, err)
		}
	}
	if n := testutil.ToFloat64(n1.srv.cluster.forwarded.WithLabelValues("MutateRows")) - before; n != calls {
		t.Fatalf("n1 forwarded %v pieces to n2, want one a call (%d)", n, calls)
	}
	forwarded := 0
	got := map[string]bool{}
	if err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		cells := r["cf"]
		if len(cells) != 1 || cells[0].Column != "cf:q" || cells[0].Timestamp != 1000 || !bytes.Equal(cells[0].Value, heldValue(r.Key())) {
			t.Errorf("row %q reads back as %v", r.Key(), cells)
			return false
		}
		got[r.Key()] = true
		if r.Key() >= "r050" {
			forwarded++
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != calls*rows || forwarded != calls*rows/2 {
		t.Fatalf("%d rows read back (%d of them n2's), want %d (%d)", len(got), forwarded, calls*rows, calls*rows/2)
	}
}
