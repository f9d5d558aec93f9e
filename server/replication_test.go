package server

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// cluster is one in-process ebbtable cluster of a replication test, with
// official clients of its own.
type cluster struct {
	srv    *Server
	client *bigtable.Client
	admin  *bigtable.AdminClient
}

// startCluster starts a cluster with the real clock (replication runs
// between processes in real time); join is a peer's address or "".
func startCluster(t *testing.T, id, join, dir string) *cluster {
	t.Helper()
	return startClusterOn(t, id, join, dir, clock.Real{})
}

// startClusterOn is startCluster on the given clock.
func startClusterOn(t *testing.T, id, join, dir string, clk clock.Clock) *cluster {
	t.Helper()
	return startClusterTuned(t, id, join, dir, clk, nil)
}

// startClusterTuned is startClusterOn with the options adjusted by tune.
func startClusterTuned(t *testing.T, id, join, dir string, clk clock.Clock, tune func(*Options)) *cluster {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	opts := Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: dir, Clock: clk, ClusterID: id, Join: join}
	if tune != nil {
		tune(&opts)
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		srv.Close()
		t.Fatal(err)
	}
	c := &cluster{srv: srv}
	c.client, c.admin = officialClients(t, srv.Addr(), "")
	t.Cleanup(func() { c.stop() })
	return c
}

func (c *cluster) stop() {
	if c.srv == nil {
		return
	}
	c.client.Close()
	c.admin.Close()
	c.srv.Close()
	c.srv = nil
}

// officialClients connects the official data and admin clients to addr,
// with an app profile ("" for the default).
func officialClients(t testing.TB, addr, profile string) (*bigtable.Client, *bigtable.AdminClient) {
	t.Helper()
	return testkit.Clients(t, addr, testProject, testInstance, profile)
}

// dumpTable lists every cell of a table, sorted: a full-table checksum.
func dumpTable(t *testing.T, c *cluster, name string) string {
	t.Helper()
	var lines []string
	err := c.client.Open(name).ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		for fam, items := range r {
			for _, it := range items {
				lines = append(lines, fmt.Sprintf("%s %s %s %d %s", it.Row, fam, it.Column, it.Timestamp, it.Value))
			}
		}
		return true
	})
	if err != nil {
		return "error: " + err.Error()
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// eventually retries cond for up to 20 s.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	testkit.Eventually(t, what, 20*time.Second, cond)
}

// pullsLater waits until c has applied n more complete pulls from peer:
// each raises the source's closed timestamp it has applied through.
func pullsLater(t *testing.T, c *cluster, peer string, n int) {
	t.Helper()
	for range n {
		from := c.srv.repl.Through(peer)
		eventually(t, "a pull from "+peer, func() (bool, string) {
			return c.srv.repl.Through(peer) > from, ""
		})
	}
}

func converged(t *testing.T, name string, cs ...*cluster) func() (bool, string) {
	return func() (bool, string) {
		first := dumpTable(t, cs[0], name)
		for _, c := range cs[1:] {
			if d := dumpTable(t, c, name); d != first {
				return false, fmt.Sprintf("\n%s:\n%s\n%s:\n%s", cs[0].srv.opts.ClusterID, first, c.srv.opts.ClusterID, d)
			}
		}
		return true, ""
	}
}

func apply(t *testing.T, c *cluster, tbl, row, fam, col string, ts bigtable.Timestamp, val string) {
	t.Helper()
	m := bigtable.NewMutation()
	m.Set(fam, col, ts, []byte(val))
	if err := c.client.Open(tbl).Apply(context.Background(), row, m); err != nil {
		t.Fatal(err)
	}
}

// TestJoinCopiesThenReplicatesBothWays: a cluster joining copies the data
// written before it joined, then writes, deletes and new tables flow both
// ways; concurrent writes to one cell converge.
func TestJoinCopiesThenReplicatesBothWays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := startCluster(t, "a", "", "")
	if err := a.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", ColumnFamilies: map[string]bigtable.Family{"f": {GCPolicy: bigtable.NoGcPolicy()}}}); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		apply(t, a, "t", fmt.Sprintf("before-%02d", i), "f", "c", 1000, "v")
	}
	b := startCluster(t, "b", a.srv.Addr(), "")
	// The copy is complete before b serves.
	if got := strings.Count(dumpTable(t, b, "t"), "\n") + 1; got != 50 {
		t.Fatalf("b has %d cells after joining, want 50", got)
	}
	apply(t, a, "t", "from-a", "f", "c", 2000, "a")
	apply(t, b, "t", "from-b", "f", "c", 2000, "b")
	del := bigtable.NewMutation()
	del.DeleteRow()
	if err := b.client.Open("t").Apply(ctx, "before-00", del); err != nil {
		t.Fatal(err)
	}
	// The same cell written on both: one value wins everywhere.
	apply(t, a, "t", "both", "f", "c", 3000, "a")
	apply(t, b, "t", "both", "f", "c", 3000, "b")
	eventually(t, "convergence", converged(t, "t", a, b))
	d := dumpTable(t, a, "t")
	for _, want := range []string{"from-a f f:c 2000 a", "from-b f f:c 2000 b"} {
		if !strings.Contains(d, want) {
			t.Errorf("missing %q in\n%s", want, d)
		}
	}
	if strings.Contains(d, "before-00 ") {
		t.Errorf("deleted row still there:\n%s", d)
	}

	// GetTable's replication view names both clusters, READY.
	conn, err := grpc.NewClient(a.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tb, err := adminpb.NewBigtableTableAdminClient(conn).GetTable(ctx, &adminpb.GetTableRequest{Name: tableName("t"), View: adminpb.Table_REPLICATION_VIEW})
	if err != nil {
		t.Fatal(err)
	}
	if cs := tb.GetClusterStates(); len(cs) != 2 || cs["a"].GetReplicationState() != adminpb.Table_ClusterState_READY || cs["b"].GetReplicationState() != adminpb.Table_ClusterState_READY {
		t.Errorf("replication view %v", cs)
	}

	// A table created on b, with a family added later, reaches a.
	if err := b.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "u", ColumnFamilies: map[string]bigtable.Family{"g": {GCPolicy: bigtable.MaxVersionsPolicy(1)}}}); err != nil {
		t.Fatal(err)
	}
	if err := b.admin.CreateColumnFamily(ctx, "u", "h"); err != nil {
		t.Fatal(err)
	}
	apply(t, b, "u", "r", "h", "c", 1000, "x")
	eventually(t, "table u on a", converged(t, "u", a, b))
	info, err := a.admin.TableInfo(ctx, "u")
	if err != nil {
		t.Fatal(err)
	}
	if len(info.FamilyInfos) != 2 {
		t.Fatalf("a's families of u: %+v", info.FamilyInfos)
	}
	// Deleting it on a deletes it on b.
	if err := a.admin.DeleteTable(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "table u dropped on b", func() (bool, string) {
		_, err := b.admin.TableInfo(ctx, "u")
		return err != nil, fmt.Sprint(err)
	})
}

// TestWaitForReplication: a write on a is readable on b once the official
// client's WaitForReplication returns; with the link from a paused, the
// check says no and b's delay behind a grows, and after resuming it falls.
func TestWaitForReplication(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := startCluster(t, "a", "", "")
	if err := a.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", ColumnFamilies: map[string]bigtable.Family{"f": {GCPolicy: bigtable.NoGcPolicy()}}}); err != nil {
		t.Fatal(err)
	}
	b := startCluster(t, "b", a.srv.Addr(), "")
	apply(t, a, "t", "r1", "f", "c", 1000, "v1")
	if err := a.admin.WaitForReplication(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if row, err := b.client.Open("t").ReadRow(ctx, "r1"); err != nil || len(row["f"]) != 1 {
		t.Fatalf("after waitforreplication, b has %v %v", row, err)
	}

	// Pause b's pulls from a (a pull in flight is dropped when it returns;
	// the delay growing meanwhile is TestMaxDelayWhilePaused in package
	// replication).
	b.srv.repl.Pause("a")
	apply(t, a, "t", "r2", "f", "c", 1000, "v2")
	short, cancel := context.WithTimeout(ctx, time.Second)
	if err := a.admin.WaitForReplication(short, "t"); err == nil {
		t.Fatal("WaitForReplication returned with the link paused")
	}
	cancel()
	if row, _ := b.client.Open("t").ReadRow(ctx, "r2"); len(row) != 0 {
		t.Fatalf("paused link delivered %v", row)
	}
	b.srv.repl.Resume("a")
	if err := a.admin.WaitForReplication(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if row, err := b.client.Open("t").ReadRow(ctx, "r2"); err != nil || len(row["f"]) != 1 {
		t.Fatalf("after healing, b has %v %v", row, err)
	}
	eventually(t, "delay falls", func() (bool, string) {
		d, _ := b.srv.repl.MaxDelay("a")
		return d < 2*time.Second, d.String()
	})
}

// TestAppProfilesTravel: a profile created on one cluster is usable
// through another; its deletion travels too and is not adopted back from
// the peer's older copy; created again, it travels again.
func TestAppProfilesTravel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := startCluster(t, "a", "", "")
	b := startCluster(t, "b", a.srv.Addr(), "")
	conn, err := grpc.NewClient(a.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = adminpb.NewBigtableInstanceAdminClient(conn).CreateAppProfile(ctx, &adminpb.CreateAppProfileRequest{
		Parent: "projects/" + testProject + "/instances/" + testInstance, AppProfileId: "any",
		AppProfile: &adminpb.AppProfile{RoutingPolicy: &adminpb.AppProfile_MultiClusterRoutingUseAny_{MultiClusterRoutingUseAny: &adminpb.AppProfile_MultiClusterRoutingUseAny{}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	bconn, err := grpc.NewClient(b.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer bconn.Close()
	name := "projects/" + testProject + "/instances/" + testInstance + "/appProfiles/any"
	has := func(c *grpc.ClientConn) error {
		_, err := adminpb.NewBigtableInstanceAdminClient(c).GetAppProfile(ctx, &adminpb.GetAppProfileRequest{Name: name})
		return err
	}
	eventually(t, "profile on b", func() (bool, string) {
		err := has(bconn)
		return err == nil, fmt.Sprint(err)
	})
	if _, err := adminpb.NewBigtableInstanceAdminClient(conn).DeleteAppProfile(ctx, &adminpb.DeleteAppProfileRequest{Name: name, IgnoreWarnings: true}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "deletion on b", func() (bool, string) {
		err := has(bconn)
		return status.Code(err) == codes.NotFound, fmt.Sprint(err)
	})
	// Two pulls later, a still has no profile (b's copy was older).
	pullsLater(t, a, "b", 2)
	if err := has(conn); status.Code(err) != codes.NotFound {
		t.Fatalf("profile deleted on a came back: %v", err)
	}
	_, err = adminpb.NewBigtableInstanceAdminClient(bconn).CreateAppProfile(ctx, &adminpb.CreateAppProfileRequest{
		Parent: "projects/" + testProject + "/instances/" + testInstance, AppProfileId: "any",
		AppProfile: &adminpb.AppProfile{Description: "again", RoutingPolicy: &adminpb.AppProfile_MultiClusterRoutingUseAny_{MultiClusterRoutingUseAny: &adminpb.AppProfile_MultiClusterRoutingUseAny{}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "profile created again, on a", func() (bool, string) {
		err := has(conn)
		return err == nil, fmt.Sprint(err)
	})
}

// diffOf runs ReplicationDiff on c against its peers.
func diffOf(t *testing.T, c *cluster, tbl string, repair bool) []*ebbadminpb.DiffCell {
	t.Helper()
	out, err := (&ebbAdmin{s: c.srv}).ReplicationDiff(context.Background(), &ebbadminpb.ReplicationDiffRequest{Project: testProject, Instance: testInstance, Table: tbl, Repair: repair})
	if err != nil {
		t.Fatal(err)
	}
	var cells []*ebbadminpb.DiffCell
	for _, p := range out.GetPeers() {
		cells = append(cells, p.GetCells()...)
	}
	return cells
}

// TestReplicationDiff: a write not yet pulled is in flight; a cell lost on
// one side (deleted there without replication) is unexpected, and repair
// copies it back.
func TestReplicationDiff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := startCluster(t, "a", "", "")
	if err := a.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", ColumnFamilies: map[string]bigtable.Family{"f": {GCPolicy: bigtable.NoGcPolicy()}}}); err != nil {
		t.Fatal(err)
	}
	bulkSet(t, a.client.Open("t"), 1200, "r%04d", "f", "c", 1000, "v") // several chunks
	b := startCluster(t, "b", a.srv.Addr(), "")
	if d := diffOf(t, a, "t", false); len(d) != 0 {
		t.Fatalf("fresh copy differs: %v", d)
	}
	b.srv.repl.Pause("a")
	apply(t, a, "t", "r0600", "f", "new", 2000, "w")
	d := diffOf(t, a, "t", false)
	if len(d) != 1 || d[0].GetClass() != classInFlight || d[0].GetOn() != "a" || string(d[0].GetQualifier()) != "new" {
		t.Fatalf("paused link: %v", d)
	}
	b.srv.repl.Resume("a")
	if err := a.admin.WaitForReplication(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	m, err := b.srv.engine.Table("projects/"+testProject+"/instances/"+testInstance, "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.srv.engine.DeleteRawCell(m, table.RawCell{Row: []byte("r1100"), Family: "f", Qualifier: []byte("c"), Timestamp: 1000}); err != nil {
		t.Fatal(err)
	}
	d = diffOf(t, a, "t", true)
	if len(d) != 1 || d[0].GetClass() != classUnexpected || string(d[0].GetRow()) != "r1100" || d[0].GetLacking() != "b" {
		t.Fatalf("lost cell: %v", d)
	}
	if d := diffOf(t, a, "t", false); len(d) != 0 {
		t.Fatalf("after repair: %v", d)
	}
}

// TestDeleteClusterForgetsPeer: a cluster deleted on a is forgotten there
// and stays forgotten although another peer still lists it.
func TestDeleteClusterForgetsPeer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := startCluster(t, "a", "", "")
	b := startCluster(t, "b", a.srv.Addr(), "")
	c := startCluster(t, "c", a.srv.Addr(), "")
	eventually(t, "b learns c", func() (bool, string) { p, ok := b.srv.peers.get("c"); return ok && p.Ready, "" })
	conn, err := grpc.NewClient(a.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	iac := adminpb.NewBigtableInstanceAdminClient(conn)
	if _, err := iac.DeleteCluster(ctx, &adminpb.DeleteClusterRequest{Name: "projects/" + testProject + "/instances/" + testInstance + "/clusters/c"}); err != nil {
		t.Fatal(err)
	}
	c.stop()
	pullsLater(t, a, "b", 3) // a's pulls from b, which still lists c
	if _, ok := a.srv.peers.get("c"); ok {
		t.Fatal("a learnt the deleted cluster c back from b")
	}
	out, err := iac.ListClusters(ctx, &adminpb.ListClustersRequest{Parent: "projects/" + testProject + "/instances/" + testInstance})
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range out.GetClusters() {
		if strings.HasSuffix(cl.GetName(), "/c") {
			t.Fatalf("c still listed: %v", out.GetClusters())
		}
	}
}

// TestLargeValuesReplicate: pulls are bounded in bytes, so writes larger in
// total than one pull carries still all arrive. The budget is lowered to
// 640 KiB so that six values of 256 KiB (2 MiB on the wire, base64) cross
// it in three pulls or more (the bound itself is TestAnswerBudget in
// package replication). With 2 MiB values under a 5 MiB budget it took
// 2.8 CPU-s under -race, most of it the race runtime over the copies.
func TestLargeValuesReplicate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	knobs := &testKnobs{}
	knobs.pullMaxBytes.set(640 << 10)
	lowBudget := func(o *Options) { o.knobs = knobs }
	a := startClusterTuned(t, "a", "", "", clock.Real{}, lowBudget)
	if err := a.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", ColumnFamilies: map[string]bigtable.Family{"f": {GCPolicy: bigtable.NoGcPolicy()}}}); err != nil {
		t.Fatal(err)
	}
	b := startClusterTuned(t, "b", a.srv.Addr(), "", clock.Real{}, lowBudget)
	// b pulls only once all six values wait: pulling while a wrote, under
	// load, b took the rows a few at a time and no answer crossed the budget.
	b.srv.repl.Pause("a")
	big := make([]byte, 256<<10)
	for i := range 6 { // 1.5 MiB, 2 MiB as base64: more than two pulls' 640 KiB
		big[0] = byte(i)
		m := bigtable.NewMutation()
		m.Set("f", "c", 1000, big)
		if err := a.client.Open("t").Apply(ctx, fmt.Sprintf("r%02d", i), m); err != nil {
			t.Fatal(err)
		}
	}
	b.srv.repl.Resume("a")
	if err := a.admin.WaitForReplication(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := b.client.Open("t").ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		n++
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if n != 6 {
		t.Fatalf("b has %d of 6 rows", n)
	}
	// The knob at work: some answer of a's stopped at the budget.
	if k := a.srv.repl.BudgetSpent(); k == 0 {
		t.Errorf("none of a's pull answers reached the %d-byte budget: the test did not cross it", 640<<10)
	}
}
