package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// storyNode is one `ebbtable serve --debug-clock` process of the story and
// the clients connected to it.
type storyNode struct {
	proc   *testkit.Serve
	client *bigtable.Client
	admin  *bigtable.AdminClient
	ebb    ebbadminpb.EbbAdminClient
}

// TestSeedDivergenceStory plays the seed's example on three processes
// whose clocks the test moves (serve --debug-clock, set through the admin
// API): row ip#685, family profile, column click-through, a cell of
// 2023-01-02 under a 30-day rule. Cluster a collects it at 31 days; the
// rule goes to 50 days; cluster b, collecting after the change, keeps it
// for 20 more days. The divergence gauge reads 20 days and the replication
// diff lists the cell as expected. Age GC ships nothing; versions GC is
// decided on the leader and reaches b's change stream from a; a raise of
// more than 90 days is refused, 90 is accepted; a coordinated raise leaves
// no divergence. The cli package's TestReplicationCommands checks what the
// commands print for the same steps.
func TestSeedDivergenceStory(t *testing.T) {
	t.Parallel() // its clocks are the servers' --debug-clock, not the machine's
	ctx := context.Background()
	const project, instance = "ebbtable", "ebbtable"
	aHTTP := testkit.FreeAddr(t)
	serve := func(id, httpAddr, join string) *storyNode {
		t.Helper()
		args := []string{"serve", "--cluster-id", id, "--addr", "127.0.0.1:0", "--http-addr", httpAddr, "--data", t.TempDir(),
			"--debug-clock", "2023-01-02T00:00:00Z", "--gc-interval", "1000h", "--ballast-size", "0"}
		if join != "" {
			args = append(args, "--join", join)
		}
		p := testkit.StartServe(t, ebbtableBin, testkit.CleanEnv(home), args...)
		n := &storyNode{proc: p, ebb: ebbadminpb.NewEbbAdminClient(testkit.Dial(t, p.Addr))}
		n.client, n.admin = testkit.Clients(t, p.Addr, project, instance, "")
		return n
	}
	a := serve("a", aHTTP, "")
	day := 24 * time.Hour
	if err := a.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", ColumnFamilies: map[string]bigtable.Family{
		"profile": {GCPolicy: bigtable.MaxAgePolicy(30 * day)},
		"other":   {GCPolicy: bigtable.MaxAgePolicy(30 * day)},
	}}); err != nil {
		t.Fatal(err)
	}
	b := serve("b", "off", a.proc.Addr)
	c := serve("c", "off", a.proc.Addr)
	all := []*storyNode{a, b, c}
	date := func(s string) time.Time {
		tm, err := time.Parse(time.DateOnly, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	put := func(row, col string, ts time.Time) {
		t.Helper()
		m := bigtable.NewMutation()
		fam, q, _ := strings.Cut(col, ":")
		m.Set(fam, q, bigtable.Time(ts), []byte("v"))
		if err := a.client.Open("t").Apply(ctx, row, m); err != nil {
			t.Fatal(err)
		}
	}
	gcRun := func(n *storyNode) {
		t.Helper()
		if _, err := n.ebb.GcRun(ctx, &ebbadminpb.GcRunRequest{Project: project, Instance: instance, Table: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	replicated := func() {
		t.Helper()
		if err := a.admin.WaitForReplication(ctx, "t"); err != nil {
			t.Fatal(err)
		}
	}
	metric := func(name string) (float64, bool) { return testkit.Metric(t, aHTTP, name) }
	put("ip#685", "profile:click-through", date("2023-01-02"))
	put("ip#700", "other:c", date("2022-12-20"))
	put("ip#701", "other:c", date("2023-01-02"))
	replicated()

	// Day 31 on every cluster.
	for _, n := range all {
		if _, err := n.ebb.DebugClock(ctx, &ebbadminpb.DebugClockRequest{Set: "2023-02-02T00:00:00Z"}); err != nil {
			t.Fatal(err)
		}
	}
	// a collects the cell under the 30-day rule, and says how far it has
	// collected by age.
	gcRun(a)
	if row, err := a.client.Open("t").ReadRow(ctx, "ip#685"); err != nil || len(row) != 0 {
		t.Fatalf("a still has %v (%v)", row, err)
	}
	st, err := a.ebb.GcStatus(ctx, &ebbadminpb.GcStatusRequest{Project: project, Instance: instance})
	if err != nil {
		t.Fatal(err)
	}
	cutoff := ""
	for _, tb := range st.GetTables() {
		for _, f := range tb.GetFamilies() {
			if tb.GetTable() == "t" && f.GetName() == "profile" {
				cutoff = f.GetAgeCutoff()
			}
		}
	}
	// 30 days before the pass, on a clock that runs on from the moment set.
	if ts, err := time.Parse(time.RFC3339Nano, cutoff); err != nil || ts.Before(date("2023-01-03")) || ts.After(date("2023-01-03").Add(time.Minute)) {
		t.Fatalf("a's age cutoff for profile is %q, want 2023-01-03T00:00 (status %v)", cutoff, st)
	}

	// The rule goes to 50 days and reaches b; b collects after the change
	// and keeps the cell.
	if err := a.admin.SetGCPolicy(ctx, "t", "profile", bigtable.MaxAgePolicy(50*day)); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "b has the 50-day rule", 20*time.Second, func() (bool, string) {
		info, err := b.admin.TableInfo(ctx, "t")
		if err != nil {
			return false, err.Error()
		}
		for _, f := range info.FamilyInfos {
			if f.Name == "profile" {
				return strings.Contains(f.GCPolicy, "50d") || strings.Contains(f.GCPolicy, "1200h"), f.GCPolicy
			}
		}
		return false, "no profile family"
	})
	gcRun(b)
	if row, err := b.client.Open("t").ReadRow(ctx, "ip#685"); err != nil || len(row["profile"]) != 1 {
		t.Fatalf("b lost the cell: %v %v", row, err)
	}
	gauge := `ebbtable_replication_gc_divergence_seconds{family="profile",table="t"}`
	testkit.Eventually(t, "the divergence gauge reads 20 days", 20*time.Second, func() (bool, string) {
		v, ok := metric(gauge)
		// 20 days, give or take the milliseconds between the two passes.
		return ok && math.Abs(v-(20*day).Seconds()) < 60, fmt.Sprint(v, ok)
	})
	diff := func() []string {
		t.Helper()
		d, err := a.ebb.ReplicationDiff(ctx, &ebbadminpb.ReplicationDiffRequest{Project: project, Instance: instance, Table: "t"})
		if err != nil {
			t.Fatal(err)
		}
		var cells []string
		for _, p := range d.GetPeers() {
			for _, c := range p.GetCells() {
				cells = append(cells, fmt.Sprintf("%s %s:%s %s %s %s %s", c.GetRow(), c.GetFamily(), c.GetQualifier(),
					time.UnixMicro(c.GetTimestamp()).UTC().Format(time.RFC3339), c.GetOn(), c.GetLacking(), c.GetClass()))
			}
		}
		return cells
	}
	want := "ip#685 profile:click-through 2023-01-02T00:00:00Z b a expected"
	if cells := diff(); !strings.Contains(strings.Join(cells, "\n"), want) {
		t.Fatalf("the diff does not list %q:\n%s", want, strings.Join(cells, "\n"))
	}
	// Age GC shipped nothing.
	if v, _ := metric(`ebbtable_replication_gc_deletes_shipped_total{table="t"}`); v != 0 {
		t.Errorf("age GC shipped %v deletes", v)
	}

	// Versions GC is decided once, on the leader (a, the smallest id), and
	// reaches b's change stream as GARBAGE_COLLECTION from a.
	if err := b.admin.UpdateTableWithChangeStream(ctx, "t", 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := a.admin.CreateColumnFamily(ctx, "t", "hist"); err != nil {
		t.Fatal(err)
	}
	if err := a.admin.SetGCPolicy(ctx, "t", "hist", bigtable.MaxVersionsPolicy(1)); err != nil {
		t.Fatal(err)
	}
	put("ip#685", "hist:c", date("2023-01-30"))
	put("ip#685", "hist:c", date("2023-01-31"))
	replicated()
	gcRun(a)
	replicated()
	bNow, err := b.ebb.DebugClock(ctx, &ebbadminpb.DebugClockRequest{Advance: "1s"})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := b.ebb.Watch(ctx, &ebbadminpb.WatchRequest{Project: project, Instance: instance, Table: "t", Since: "oldest", Until: bNow.GetNow()})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, r.GetLine())
	}
	found := false
	for _, l := range lines {
		if strings.Contains(l, `"type":"GARBAGE_COLLECTION","reason":"gc-versions"`) && strings.Contains(l, `"source_cluster_id":"a"`) && strings.Contains(l, `"family":"hist"`) {
			found = true
		}
	}
	if !found {
		t.Fatalf("b's change stream lacks a's versions collection:\n%s", strings.Join(lines, "\n"))
	}
	if v, _ := metric(`ebbtable_replication_gc_deletes_shipped_total{table="t"}`); v < 1 {
		t.Errorf("versions GC shipped %v deletes", v)
	}

	// Raises: by 91 days refused, by 90 accepted.
	err = a.admin.SetGCPolicy(ctx, "t", "profile", bigtable.MaxAgePolicy(141*day))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "90") {
		t.Fatalf("91-day raise: %v", err)
	}
	if err := a.admin.SetGCPolicy(ctx, "t", "profile", bigtable.MaxAgePolicy(140*day)); err != nil {
		t.Fatalf("90-day raise: %v", err)
	}

	// A coordinated raise of "other" (a collected it alone first): every
	// cluster collects under the old rule at one instant, then the rule
	// changes; the clusters agree.
	gcRun(a)
	raised, err := a.ebb.GcRaise(ctx, &ebbadminpb.GcRaiseRequest{Project: project, Instance: instance, Table: "t", Family: "other", Rule: "maxage=60d", Coordinated: true})
	if err != nil || raised.GetClusters() != 3 {
		t.Fatalf("coordinated raise: %v %v", raised, err)
	}
	for _, n := range all {
		gcRun(n)
	}
	testkit.Eventually(t, "no divergence on other", 20*time.Second, func() (bool, string) {
		v, ok := metric(`ebbtable_replication_gc_divergence_seconds{family="other",table="t"}`)
		return ok && v == 0, fmt.Sprint(v, ok)
	})
	if cells := diff(); strings.Contains(strings.Join(cells, "\n"), "other:") {
		t.Fatalf("the coordinated raise left differences:\n%s", strings.Join(cells, "\n"))
	}
	for _, n := range all {
		if code := n.proc.Terminate(t); code != 0 {
			t.Errorf("exit %d: %s", code, n.proc.Stderr.String())
		}
	}
}
