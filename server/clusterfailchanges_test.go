package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// csHistoryCluster is a failover cluster with table t split at g and p,
// with a change stream; it returns the owner of [p, ) and the time the
// stream's records start after.
func csHistoryCluster(t *testing.T) (*scaleCluster, string, time.Time) {
	t.Helper()
	sc := startFailoverCluster(t)
	ctx := context.Background()
	err := sc.nodes["n1"].admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", SplitKeys: []string{"g", "p"},
		ColumnFamilies: map[string]bigtable.Family{"f": {}}, ChangeStreamRetention: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	tabs, err := sc.nodes["n1"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil || len(tabs.Tablets) != 3 {
		t.Fatalf("tablets %v %v", tabs, err)
	}
	return sc, tabs.Tablets[2].Owner, start
}

// csHistoryBefore writes a1..a5 to [p, ), has the victim checkpoint them
// (its log is truncated past them: only the checkpoint's records hold
// them), reads a1..a3 through reader and returns the token after a3, then
// writes b1..b5 (in the victim's log only).
func csHistoryBefore(t *testing.T, sc *scaleCluster, victim, reader string, start time.Time) *btpb.StreamContinuationToken {
	t.Helper()
	tbl := sc.nodes[reader].client.Open("t")
	for i := 1; i <= 5; i++ {
		if err := writeScale(t, tbl, fmt.Sprintf("q%d", i), fmt.Sprintf("a%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	fullRound(t, sc.nodes[victim])
	cat, ok, err := storage.ReadCatalog(sc.nodes[victim].srv.cluster.store, victim)
	if err != nil || !ok {
		t.Fatalf("%s's catalog: %v %v", victim, ok, err)
	}
	withChanges := 0
	for _, e := range cat.Entries {
		if e.Changes != "" {
			withChanges++
		}
	}
	if withChanges != 1 {
		t.Fatalf("%s's catalog has %d checkpoints with change records, want 1: %+v", victim, withChanges, cat.Entries)
	}
	c := btpb.NewBigtableClient(sc.nodes[reader].conn)
	vals, tok, _ := csRead(t, c, &btpb.ReadChangeStreamRequest{Partition: partitionOf("p", ""),
		StartFrom: &btpb.ReadChangeStreamRequest_StartTime{StartTime: timestamppb.New(start)}},
		func(v []string) bool { return len(v) == 3 })
	if strings.Join(vals, ",") != "a1,a2,a3" {
		t.Fatalf("first read: %v", vals)
	}
	for i := 1; i <= 5; i++ {
		if err := writeScale(t, tbl, fmt.Sprintf("r%d", i), fmt.Sprintf("b%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	return tok
}

// csHistoryAfter writes c1 through reader, then checks that the token
// resumes with a4..c1 (nothing lost or repeated) and that a read from the
// start finds the whole history.
func csHistoryAfter(t *testing.T, sc *scaleCluster, reader string, start time.Time, tok *btpb.StreamContinuationToken) {
	t.Helper()
	if err := writeScale(t, sc.nodes[reader].client.Open("t"), "s1", "c1"); err != nil {
		t.Fatal(err)
	}
	c := btpb.NewBigtableClient(sc.nodes[reader].conn)
	want := "a4,a5,b1,b2,b3,b4,b5,c1"
	read := func(req *btpb.ReadChangeStreamRequest, n int) []string {
		cvs, _, _ := csReadCommits(t, c, req, func(cvs []csValue) bool {
			v := csOnce(cvs)
			return len(v) >= n || (len(v) > 0 && v[len(v)-1] == "c1")
		})
		return csOnce(cvs)
	}
	vals := read(&btpb.ReadChangeStreamRequest{Partition: partitionOf("p", ""), StartFrom: fromTokens(tok)}, 8)
	if got := strings.Join(vals, ","); got != want {
		t.Fatalf("resumed from the token: %s, want %s", got, want)
	}
	vals = read(&btpb.ReadChangeStreamRequest{Partition: partitionOf("p", ""),
		StartFrom: &btpb.ReadChangeStreamRequest_StartTime{StartTime: timestamppb.New(start)}}, 11)
	if got := strings.Join(vals, ","); got != "a1,a2,a3,"+want {
		t.Fatalf("read from the start: %s, want a1,a2,a3,%s", got, want)
	}
}

// TestFailoverChangeStreamHistory: a take-over rebuilds the dead node's
// change-stream records of its tablets, those its last checkpoint carries
// and those its commit log holds, under their own positions: a token
// taken on the dead node resumes on the new owner with nothing lost or
// repeated, the new owner's own records follow, and a read from the start
// finds the whole history.
func TestFailoverChangeStreamHistory(t *testing.T) {
	t.Parallel()
	sc, victim, start := csHistoryCluster(t)
	reader := "n1"
	if victim == reader {
		reader = "n2"
	}
	tok := csHistoryBefore(t, sc, victim, reader, start)
	sc.nodes[victim].crash()
	testkit.Eventually(t, victim+"'s tablet to be taken over", 30*time.Second, func() (bool, string) {
		got := owners(t, sc.nodes[reader])
		return !strings.Contains(got, victim), got
	})
	csHistoryAfter(t, sc, reader, start, tok)
}

// TestDrainForceChangeStreamHistory: node drain --force gives a dead
// node's tablets away without their cells, but its change-stream records
// its checkpoints and log hold go to the new owners, as a take-over would
// bring them.
func TestDrainForceChangeStreamHistory(t *testing.T) {
	t.Parallel()
	sc, victim, start := csHistoryCluster(t)
	reader := "n1"
	if victim == reader {
		reader = "n2"
	}
	for id, n := range sc.nodes {
		if id != victim {
			n.srv.cluster.fail.takeOversPaused.Store(true)
		}
	}
	tok := csHistoryBefore(t, sc, victim, reader, start)
	sc.nodes[victim].crash()
	ctx := context.Background()
	testkit.Eventually(t, victim+"'s lease to expire", 30*time.Second, func() (bool, string) {
		_, live := sc.nodes[reader].srv.cluster.m.Node(victim)
		return !live, ""
	})
	if _, err := sc.nodes[reader].ops.DrainNode(ctx, &clusterpb.DrainNodeRequest{Node: victim, Force: true}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, victim+"'s tablet to be given away", 30*time.Second, func() (bool, string) {
		got := owners(t, sc.nodes[reader])
		return !strings.Contains(got, victim), got
	})
	csHistoryAfter(t, sc, reader, start, tok)
}

// TestMoveCountsChangeRecords: the records a planned move ships are
// counted, in ebbtable_change_records_carried_total{path="move"} and in
// the bytes of ebbtable_tablet_move_bytes_shipped.
func TestMoveCountsChangeRecords(t *testing.T) {
	t.Parallel()
	sc := startScaleCluster(t, "n1", "n2")
	ctx := context.Background()
	err := sc.nodes["n1"].admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", SplitKeys: []string{"m"},
		ColumnFamilies: map[string]bigtable.Family{"f": {}}, ChangeStreamRetention: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	tabs, err := sc.nodes["n1"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil || len(tabs.Tablets) != 2 {
		t.Fatalf("tablets %v %v", tabs, err)
	}
	first := tabs.Tablets[0]
	to := "n1"
	if first.Owner == "n1" {
		to = "n2"
	}
	tbl := sc.nodes["n1"].client.Open("t")
	value := strings.Repeat("v", 1000)
	for i := range 20 {
		if err := writeScale(t, tbl, fmt.Sprintf("a%02d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	src := sc.nodes[first.Owner].srv.cluster
	res, err := sc.nodes["n1"].ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: first.Id, To: to})
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(src.changes.carried.WithLabelValues("move")); got != 20 {
		t.Fatalf("records carried by the move: %v, want 20", got)
	}
	var m dto.Metric
	if err := src.moveBytes.Write(&m); err != nil {
		t.Fatal(err)
	}
	// 20 records of a 1000-byte value each, beside the export.
	if sum := m.GetHistogram().GetSampleSum(); sum < float64(res.Bytes)+20*1000 {
		t.Fatalf("move bytes shipped %v, export %d: the records' bytes are not counted", sum, res.Bytes)
	}
}

// csOnce is the values of a stream with each write once: a value sent
// again at once under another commit is the client's retry of an
// idempotent write (writeScale's explicit timestamp) whose first attempt
// committed but whose answer was lost (a lease lapsing at load ~28: the
// dead node's history then holds 11 records, b5 twice), so it is dropped;
// one sent again under the same commit is a repeated delivery and kept,
// for the caller's comparison to fail on.
func csOnce(cvs []csValue) []string {
	var out []string
	for i, cv := range cvs {
		if i > 0 && cv.v == cvs[i-1].v && (!cv.at.Equal(cvs[i-1].at) || cv.tie != cvs[i-1].tie) {
			continue
		}
		out = append(out, cv.v)
	}
	return out
}

// TestCsOnce: a retried write (another commit) is dropped, a repeated
// delivery (the same commit) is not.
func TestCsOnce(t *testing.T) {
	t1, t2 := time.UnixMicro(10), time.UnixMicro(11)
	if got := strings.Join(csOnce([]csValue{{"a", t1, 1}, {"b", t2, 1}, {"b", t1, 1}}), ","); got != "a,b" {
		t.Errorf("retried write: %s", got)
	}
	if got := strings.Join(csOnce([]csValue{{"a", t1, 1}, {"a", t1, 1}}), ","); got != "a,a" {
		t.Errorf("repeated delivery: %s", got)
	}
	if got := strings.Join(csOnce([]csValue{{"a", t1, 1}, {"a", t1, 2}}), ","); got != "a" {
		t.Errorf("another node's commit: %s", got)
	}
}
