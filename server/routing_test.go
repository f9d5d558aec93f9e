package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/internal/testkit"
)

// clusterNode is one process of a multi-cluster instance in a routing test.
// No replication runs between nodes: a row is on the cluster that served
// its write, so where it is shows where the write was routed.
type clusterNode struct {
	id     string
	srv    *Server
	tbl    *bigtable.Table // table "t" through the default profile
	iac    *bigtable.InstanceAdminClient
	raw    btpb.BigtableClient
	closed bool
}

func (n *clusterNode) stop() {
	if !n.closed {
		n.closed = true
		n.srv.Close()
	}
}

// startClusters starts one server per id (sharing a fake clock), registers
// every other one as a ready peer of each, and creates table "t" (family
// "f") on each.
func startClusters(t *testing.T, ids ...string) (map[string]*clusterNode, *clock.Fake) {
	t.Helper()
	ctx := context.Background()
	fake := clock.NewFake(time.Now().Truncate(time.Millisecond))
	nodes := map[string]*clusterNode{}
	for _, id := range ids {
		srv, err := New(Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: t.TempDir(), Clock: fake, ClusterID: id})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			srv.engine.Close()
			t.Fatal(err)
		}
		n := &clusterNode{id: id, srv: srv}
		t.Cleanup(n.stop)
		nodes[id] = n
	}
	for _, a := range nodes {
		// No pullers: these tests see where a request was served by where
		// its write landed, so replication stays off.
		a.srv.peers.onAdd = nil
		for _, b := range nodes {
			if a != b {
				if err := a.srv.peers.add(peerInfo{ID: b.id, Addr: b.srv.Addr(), Ready: true}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, id := range ids {
		n := nodes[id]
		admin := testkit.Admin(t, n.srv.Addr(), testProject, testInstance)
		if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", ColumnFamilies: map[string]bigtable.Family{"f": {GCPolicy: bigtable.NoGcPolicy()}}}); err != nil {
			t.Fatal(err)
		}
		n.tbl = routedClient(t, n, "")
		conn, err := grpc.NewClient(n.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		iac, err := bigtable.NewInstanceAdminClient(ctx, testProject, option.WithGRPCConn(conn))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { iac.Close(); conn.Close() })
		n.iac, n.raw = iac, btpb.NewBigtableClient(conn)
	}
	return nodes, fake
}

// routedClient opens table "t" on a node through an app profile.
func routedClient(t *testing.T, n *clusterNode, profile string) *bigtable.Table {
	t.Helper()
	return testkit.Client(t, n.srv.Addr(), testProject, testInstance, profile).Open("t")
}

func (n *clusterNode) profile(t *testing.T, id string, rc bigtable.RoutingPolicyConfig) {
	t.Helper()
	if _, err := n.iac.CreateAppProfile(context.Background(), bigtable.ProfileConf{InstanceID: testInstance, ProfileID: id, RoutingConfig: rc}); err != nil {
		t.Fatalf("create profile %s on %s: %v", id, n.id, err)
	}
}

// row reads a row directly on the node (default profile, served locally).
func (n *clusterNode) row(t *testing.T, key string) bigtable.Row {
	t.Helper()
	r, err := n.tbl.ReadRow(context.Background(), key)
	if err != nil {
		t.Fatalf("read %s on %s: %v", key, n.id, err)
	}
	return r
}

// holders lists the clusters that have the row.
func holders(t *testing.T, nodes map[string]*clusterNode, key string, ids ...string) []string {
	t.Helper()
	var out []string
	for _, id := range ids {
		if len(nodes[id].row(t, key)) > 0 {
			out = append(out, id)
		}
	}
	return out
}

func setCell(col, val string) *bigtable.Mutation {
	m := bigtable.NewMutation()
	m.Set("f", col, 1000, []byte(val))
	return m
}

func rawMutate(profile, key string) *btpb.MutateRowRequest {
	return &btpb.MutateRowRequest{TableName: tableName("t"), AppProfileId: profile, RowKey: []byte(key),
		Mutations: []*btpb.Mutation{{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{FamilyName: "f", ColumnQualifier: []byte("c"), TimestampMicros: 1000, Value: []byte("v")}}}}}
}

// TestRoutingSingleClusterForwards: a single-cluster profile on A naming B
// sends every data RPC to B; A stores nothing.
func TestRoutingSingleClusterForwards(t *testing.T) {
	t.Parallel()
	nodes, _ := startClusters(t, "a", "b")
	a, b := nodes["a"], nodes["b"]
	ctx := context.Background()
	a.profile(t, "p", &bigtable.SingleClusterRoutingConfig{ClusterID: "b", AllowTransactionalWrites: true})
	tbl := routedClient(t, a, "p")

	if err := tbl.Apply(ctx, "r1", setCell("c", "v1")); err != nil {
		t.Fatal(err)
	}
	errs, err := tbl.ApplyBulk(ctx, []string{"r2", "r3"}, []*bigtable.Mutation{setCell("c", "v2"), setCell("c", "v3")})
	if err != nil || errs != nil {
		t.Fatalf("ApplyBulk: %v %v", err, errs)
	}
	if _, err := tbl.ApplyReadModifyWrite(ctx, "n", func() *bigtable.ReadModifyWrite {
		m := bigtable.NewReadModifyWrite()
		m.Increment("f", "n", 5)
		return m
	}()); err != nil {
		t.Fatal(err)
	}
	var matched bool
	cond := bigtable.NewCondMutation(bigtable.ColumnFilter("c"), setCell("d", "yes"), nil)
	if err := tbl.Apply(ctx, "r1", cond, bigtable.GetCondMutationResult(&matched)); err != nil || !matched {
		t.Fatalf("CheckAndMutate: %v matched=%v", err, matched)
	}
	for _, key := range []string{"r1", "r2", "r3", "n"} {
		if got := holders(t, nodes, key, "a", "b"); len(got) != 1 || got[0] != "b" {
			t.Errorf("row %s is on %v, want only b", key, got)
		}
	}
	if r := b.row(t, "r1"); len(r["f"]) != 2 {
		t.Errorf("r1 on b: %v (want c and d)", r)
	}
	// Reads go to b too: a has none of these rows.
	r, err := tbl.ReadRow(ctx, "r1")
	if err != nil || len(r["f"]) != 2 {
		t.Fatalf("ReadRow through p: %v %v", r, err)
	}
	var keys []string
	if err := tbl.ReadRows(ctx, bigtable.PrefixRange("r"), func(r bigtable.Row) bool {
		keys = append(keys, r.Key())
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(keys, ",") != "r1,r2,r3" {
		t.Errorf("ReadRows through p: %v", keys)
	}
	if _, err := tbl.SampleRowKeys(ctx); err != nil {
		t.Errorf("SampleRowKeys through p: %v", err)
	}
	if _, err := a.raw.PingAndWarm(ctx, &btpb.PingAndWarmRequest{Name: "projects/" + testProject + "/instances/" + testInstance, AppProfileId: "p"}); err != nil {
		t.Errorf("PingAndWarm through p: %v", err)
	}
	// A table with a change stream only on b: the change-stream RPCs through
	// p find it, the same RPC on a's own cluster does not.
	badmin := testkit.Admin(t, b.srv.Addr(), testProject, testInstance)
	if err := badmin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "cs", ColumnFamilies: map[string]bigtable.Family{"f": {}}, ChangeStreamRetention: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	gen := func(profile string) error {
		st, err := a.raw.GenerateInitialChangeStreamPartitions(ctx, &btpb.GenerateInitialChangeStreamPartitionsRequest{TableName: tableName("cs"), AppProfileId: profile})
		if err != nil {
			return err
		}
		_, err = st.Recv()
		return err
	}
	if err := gen("p"); err != nil {
		t.Errorf("GenerateInitialChangeStreamPartitions through p: %v", err)
	}
	if err := gen(""); status.Code(err) != codes.NotFound {
		t.Errorf("GenerateInitialChangeStreamPartitions on a: %v, want NotFound", err)
	}
	// The peer is a cluster of the instance.
	c, err := a.iac.GetCluster(ctx, testInstance, "b")
	if err != nil || c.State != "READY" {
		t.Errorf("cluster b seen from a: %+v %v", c, err)
	}
}

// TestRoutingForwardsMetadata: request metadata (here a cell TTL) reaches
// the cluster that serves the request.
func TestRoutingForwardsMetadata(t *testing.T) {
	t.Parallel()
	nodes, _ := startClusters(t, "a", "b")
	a, b := nodes["a"], nodes["b"]
	a.profile(t, "p", &bigtable.SingleClusterRoutingConfig{ClusterID: "b"})
	ctx := metadata.AppendToOutgoingContext(context.Background(), MetaCellTTL, "1h")
	if _, err := a.raw.MutateRow(ctx, rawMutate("p", "r")); err != nil {
		t.Fatal(err)
	}
	st, err := b.raw.ReadRows(metadata.AppendToOutgoingContext(context.Background(), MetaShowExpiry, "true"),
		&btpb.ReadRowsRequest{TableName: tableName("t"), Rows: &btpb.RowSet{RowKeys: [][]byte{[]byte("r")}}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if ch := resp.GetChunks(); len(ch) != 1 || len(ch[0].GetLabels()) != 1 || !strings.HasPrefix(ch[0].GetLabels()[0], ExpiryLabelPrefix) {
		t.Fatalf("cell on b: %v (want an expiry label)", ch)
	}
}

// TestRoutingMultiClusterFailover: a multi-cluster profile on A limited to
// B and C is served by B, then by C once B is down; a single-cluster
// profile naming the stopped B is Unavailable.
func TestRoutingMultiClusterFailover(t *testing.T) {
	t.Parallel()
	nodes, fake := startClusters(t, "a", "b", "c")
	a, b, c := nodes["a"], nodes["b"], nodes["c"]
	ctx := context.Background()
	a.profile(t, "m", &bigtable.MultiClusterRoutingUseAnyConfig{ClusterIDs: []string{"c", "b"}})
	a.profile(t, "s", &bigtable.SingleClusterRoutingConfig{ClusterID: "b"})
	tbl := routedClient(t, a, "m")

	if err := tbl.Apply(ctx, "r1", setCell("c", "v")); err != nil {
		t.Fatal(err)
	}
	if got := holders(t, nodes, "r1", "a", "b", "c"); fmt.Sprint(got) != "[b]" {
		t.Fatalf("r1 on %v, want [b]", got)
	}
	if err := c.tbl.Apply(ctx, "only-c", setCell("c", "v")); err != nil {
		t.Fatal(err)
	}
	b.stop()

	// A stream: b answers Unavailable before anything was relayed, so the
	// read fails over to c.
	r, err := tbl.ReadRow(ctx, "only-c")
	if err != nil || len(r) == 0 {
		t.Fatalf("ReadRow after b stopped: %v %v", r, err)
	}
	if a.srv.peers.routable("b") {
		t.Fatal("b was not tried (or its failure not recorded) before failing over")
	}
	// b failed just now: it is skipped.
	if err := tbl.Apply(ctx, "r2", setCell("c", "v")); err != nil {
		t.Fatal(err)
	}
	// Once the failure is older than peerHealthyWithin, b is tried again,
	// fails, and the unary call fails over to c.
	fake.Advance(peerHealthyWithin + time.Second)
	if err := tbl.Apply(ctx, "r3", setCell("c", "v")); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"r2", "r3"} {
		if got := holders(t, nodes, key, "a", "c"); fmt.Sprint(got) != "[c]" {
			t.Errorf("%s on %v, want [c]", key, got)
		}
	}

	// Single-cluster routing does not fail over.
	_, err = a.raw.MutateRow(ctx, rawMutate("s", "r4"))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "cannot be reached") {
		t.Fatalf("MutateRow through s with b down: %v, want Unavailable", err)
	}
	st, err := a.raw.ReadRows(ctx, &btpb.ReadRowsRequest{TableName: tableName("t"), AppProfileId: "s"})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("ReadRows through s with b down: %v, want Unavailable", err)
	}
	if got := holders(t, nodes, "r4", "a", "c"); len(got) != 0 {
		t.Errorf("r4 on %v", got)
	}

	// With every cluster of the set down, multi-cluster routing is
	// Unavailable; once all have failed recently they are still tried.
	c.stop()
	for i := range 2 {
		_, err = a.raw.MutateRow(ctx, rawMutate("m", "r5"))
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no cluster could be reached") || !strings.Contains(err.Error(), "c: ") {
			t.Fatalf("attempt %d with b and c down: %v, want Unavailable naming c", i, err)
		}
	}
	if !strings.Contains(err.Error(), "b: ") {
		t.Errorf("last attempt did not try b: %v", err)
	}
}

// TestRoutingMultiClusterLocalFirst: a multi-cluster profile whose set
// includes this cluster is served here.
func TestRoutingMultiClusterLocalFirst(t *testing.T) {
	t.Parallel()
	nodes, _ := startClusters(t, "a", "b")
	a := nodes["a"]
	a.profile(t, "any", &bigtable.MultiClusterRoutingUseAnyConfig{})
	if err := routedClient(t, a, "any").Apply(context.Background(), "r", setCell("c", "v")); err != nil {
		t.Fatal(err)
	}
	if got := holders(t, nodes, "r", "a", "b"); fmt.Sprint(got) != "[a]" {
		t.Fatalf("r on %v, want [a]", got)
	}
}

// TestRoutingRowAffinity: with row affinity, a single-row request goes to
// the cluster the row key hashes to among all clusters (this one included):
// always the same for a key, different for different keys.
func TestRoutingRowAffinity(t *testing.T) {
	t.Parallel()
	nodes, _ := startClusters(t, "a", "b", "c")
	a := nodes["a"]
	ctx := context.Background()
	a.profile(t, "aff", &bigtable.MultiClusterRoutingUseAnyConfig{Affinity: &bigtable.RowAffinity{}})
	tbl := routedClient(t, a, "aff")
	var keys []string
	for i := range 12 {
		keys = append(keys, fmt.Sprintf("key-%02d", i))
	}
	for _, col := range []string{"x", "y"} {
		for _, k := range keys {
			if err := tbl.Apply(ctx, k, setCell(col, k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	used := map[string]bool{}
	for _, k := range keys {
		got := holders(t, nodes, k, "a", "b", "c")
		if len(got) != 1 {
			t.Fatalf("%s on %v, want one cluster", k, got)
		}
		if want := affinityOrder([]byte(k), []string{"a", "b", "c"})[0]; got[0] != want {
			t.Errorf("%s on %s, hash says %s", k, got[0], want)
		}
		if r := nodes[got[0]].row(t, k); len(r["f"]) != 2 {
			t.Errorf("%s on %s has %v, want both writes", k, got[0], r)
		}
		// A one-row read follows the same route.
		if r, err := tbl.ReadRow(ctx, k); err != nil || len(r["f"]) != 2 {
			t.Errorf("ReadRow %s through aff: %v %v", k, r, err)
		}
		used[got[0]] = true
	}
	if len(used) < 2 {
		t.Errorf("all keys on %v", used)
	}

	// When a cluster is down, only its rows move: to the next cluster in
	// their hash order.
	var onB, onC string
	for _, k := range keys {
		switch affinityOrder([]byte(k), []string{"a", "b", "c"})[0] {
		case "b":
			onB = k
		case "c":
			onC = k
		}
	}
	if onB == "" || onC == "" {
		t.Fatalf("no key hashes to b or to c: %v", keys)
	}
	nodes["b"].stop()
	for _, k := range []string{onB, onC} {
		if err := tbl.Apply(ctx, k, setCell("z", k)); err != nil {
			t.Fatal(err)
		}
	}
	want := affinityOrder([]byte(onB), []string{"a", "b", "c"})[1]
	if r := nodes[want].row(t, onB); len(r["f"]) != 1 || r["f"][0].Column != "f:z" {
		t.Errorf("%s after b stopped: on %s %v, want the new write there", onB, want, r)
	}
	if r := nodes["c"].row(t, onC); len(r["f"]) != 3 {
		t.Errorf("%s after b stopped: on c %v, want all three writes", onC, r)
	}
}

// TestRoutingNoLoop: a forwarded request is served where it arrives even if
// that cluster's profile of the same name routes elsewhere.
func TestRoutingNoLoop(t *testing.T) {
	t.Parallel()
	nodes, _ := startClusters(t, "a", "b")
	a, b := nodes["a"], nodes["b"]
	ctx := context.Background()
	a.profile(t, "p", &bigtable.SingleClusterRoutingConfig{ClusterID: "b"})
	b.profile(t, "p", &bigtable.SingleClusterRoutingConfig{ClusterID: "a"})
	if err := routedClient(t, a, "p").Apply(ctx, "via-a", setCell("c", "v")); err != nil {
		t.Fatal(err)
	}
	if err := routedClient(t, b, "p").Apply(ctx, "via-b", setCell("c", "v")); err != nil {
		t.Fatal(err)
	}
	if got := holders(t, nodes, "via-a", "a", "b"); fmt.Sprint(got) != "[b]" {
		t.Errorf("via-a on %v, want [b]", got)
	}
	if got := holders(t, nodes, "via-b", "a", "b"); fmt.Sprint(got) != "[a]" {
		t.Errorf("via-b on %v, want [a]", got)
	}
	// A marked request is served locally whatever its profile names.
	mctx := metadata.AppendToOutgoingContext(ctx, MetaRoutedBy, "b")
	if _, err := a.raw.MutateRow(mctx, rawMutate("p", "marked")); err != nil {
		t.Fatal(err)
	}
	if got := holders(t, nodes, "marked", "a", "b"); fmt.Sprint(got) != "[a]" {
		t.Errorf("marked on %v, want [a]", got)
	}
}

// TestRoutingChecks: the profile checks happen before any forwarding.
func TestRoutingChecks(t *testing.T) {
	t.Parallel()
	nodes, _ := startClusters(t, "a", "b")
	a := nodes["a"]
	ctx := context.Background()
	a.profile(t, "multi", &bigtable.MultiClusterRoutingUseAnyConfig{ClusterIDs: []string{"b"}})
	a.profile(t, "single", &bigtable.SingleClusterRoutingConfig{ClusterID: "b"})
	a.profile(t, "tx", &bigtable.SingleClusterRoutingConfig{ClusterID: "b", AllowTransactionalWrites: true})
	rmw := func() *bigtable.ReadModifyWrite {
		m := bigtable.NewReadModifyWrite()
		m.Increment("f", "n", 1)
		return m
	}
	cond := bigtable.NewCondMutation(bigtable.PassAllFilter(), setCell("c", "v"), nil)
	for _, p := range []string{"multi", "single"} {
		tbl := routedClient(t, a, p)
		if _, err := tbl.ApplyReadModifyWrite(ctx, "n", rmw()); status.Code(err) != codes.FailedPrecondition {
			t.Errorf("ReadModifyWrite through %s: %v, want FailedPrecondition", p, err)
		}
		if err := tbl.Apply(ctx, "n", cond); status.Code(err) != codes.FailedPrecondition {
			t.Errorf("CheckAndMutate through %s: %v, want FailedPrecondition", p, err)
		}
	}
	if _, err := routedClient(t, a, "tx").ApplyReadModifyWrite(ctx, "n", rmw()); err != nil {
		t.Errorf("ReadModifyWrite through tx: %v", err)
	}
	if got := holders(t, nodes, "n", "a", "b"); fmt.Sprint(got) != "[b]" {
		t.Errorf("n on %v, want [b]", got)
	}
	if _, err := a.raw.MutateRow(ctx, rawMutate("nope", "r")); status.Code(err) != codes.NotFound {
		t.Errorf("unknown profile: %v, want NotFound", err)
	}
}

// TestRoutingChangeStreamRelay: a tailing ReadChangeStream through a
// single-cluster profile relays the peer's records and ends with
// Unavailable when the forwarding server closes, as a local one does.
func TestRoutingChangeStreamRelay(t *testing.T) {
	t.Parallel()
	nodes, fake := startClusters(t, "a", "b")
	a, b := nodes["a"], nodes["b"]
	ctx := context.Background()
	a.profile(t, "p", &bigtable.SingleClusterRoutingConfig{ClusterID: "b"})
	badmin := testkit.Admin(t, b.srv.Addr(), testProject, testInstance)
	start := fake.Now()
	if err := badmin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "cs", ColumnFamilies: map[string]bigtable.Family{"f": {GCPolicy: bigtable.NoGcPolicy()}}, ChangeStreamRetention: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.raw.MutateRow(ctx, &btpb.MutateRowRequest{TableName: tableName("cs"), RowKey: []byte("r"),
		Mutations: []*btpb.Mutation{{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{FamilyName: "f", ColumnQualifier: []byte("c"), TimestampMicros: 1000, Value: []byte("v")}}}}}); err != nil {
		t.Fatal(err)
	}
	st, err := a.raw.ReadChangeStream(ctx, &btpb.ReadChangeStreamRequest{TableName: tableName("cs"), AppProfileId: "p",
		StartFrom: &btpb.ReadChangeStreamRequest_StartTime{StartTime: timestamppb.New(start)}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("change stream through p: %v", err)
		}
		if dc := resp.GetDataChange(); dc != nil {
			if string(dc.GetRowKey()) != "r" {
				t.Fatalf("data change %v", dc)
			}
			break
		}
	}
	stopped := make(chan struct{})
	go func() { a.stop(); close(stopped) }()
	for {
		_, err := st.Recv()
		if err == nil {
			continue
		}
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "shutting down") {
			t.Errorf("relayed stream at shutdown: %v", err)
		}
		break
	}
	<-stopped
}
