package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/collector"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func (c *cluster) meta(t *testing.T, name string) (*table.Meta, bool) {
	t.Helper()
	for _, m := range c.srv.engine.Tables("") {
		if m.Name == name {
			return m, true
		}
	}
	return nil, false
}

// storedCells counts a table's cells in storage, eligible or not.
func (c *cluster) storedCells(t *testing.T, m *table.Meta) int {
	t.Helper()
	it, err := c.srv.engine.RawIter(storage.TablePrefix(m.ID), storage.TableEnd(m.ID))
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	return n
}

// gcRecords lists a table's GC records as "source/reason".
func (c *cluster) gcRecords(t *testing.T, m *table.Meta) []string {
	t.Helper()
	b, err := c.srv.engine.ReadChanges(m, changestream.TableStart(m.ID), 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range b.Records {
		if r.Type == changestream.GarbageCollection {
			out = append(out, r.SourceCluster+"/"+r.Reason)
		}
	}
	return out
}

func (c *cluster) gcPass(t *testing.T) {
	t.Helper()
	if _, err := c.srv.collector.RunPass(context.Background(), collector.Selector{}); err != nil {
		t.Fatal(err)
	}
}

// TestVersionsGCReplicatesAgeGCStaysLocal: two clusters, a the GC leader
// (smallest id). b collects by age only and leaves versions-eligible cells
// to a; a's versions deletions reach b's change stream as
// GARBAGE_COLLECTION from a; age collections are never shipped.
func TestVersionsGCReplicatesAgeGCStaysLocal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := startCluster(t, "a", "", "")
	b := startCluster(t, "b", a.srv.Addr(), "")
	eventually(t, "a leads GC", func() (bool, string) {
		return a.srv.isGCLeader() && !b.srv.isGCLeader(), fmt.Sprintf("a %v, b %v", a.srv.isGCLeader(), b.srv.isGCLeader())
	})
	conf := &bigtable.TableConf{TableID: "t", ChangeStreamRetention: 24 * time.Hour, ColumnFamilies: map[string]bigtable.Family{
		"ver": {GCPolicy: bigtable.MaxVersionsPolicy(1)},
		"age": {GCPolicy: bigtable.MaxAgePolicy(time.Hour)},
	}}
	if err := a.admin.CreateTableFromConf(ctx, conf); err != nil {
		t.Fatal(err)
	}
	eventually(t, "table t on b", func() (bool, string) { _, ok := b.meta(t, "t"); return ok, "" })
	// The change stream, for readers of b's stream, through the admin API.
	if err := b.admin.UpdateTableWithChangeStream(ctx, "t", 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	now := bigtable.Now().TruncateToMilliseconds()
	mut := bigtable.NewMutation()
	mut.Set("ver", "v", now-2000, []byte("v1"))
	mut.Set("ver", "v", now-1000, []byte("v2"))
	mut.Set("age", "a", now-bigtable.Timestamp(2*time.Hour/time.Microsecond), []byte("old"))
	mut.Set("age", "a", now, []byte("young"))
	if err := a.client.Open("t").Apply(ctx, "r", mut); err != nil {
		t.Fatal(err)
	}
	ma, _ := a.meta(t, "t")
	mb, _ := b.meta(t, "t")
	eventually(t, "the write on b", func() (bool, string) { n := b.storedCells(t, mb); return n == 4, fmt.Sprint(n) })

	// b is not the leader: it collects the age cell only.
	b.gcPass(t)
	if n := b.storedCells(t, mb); n != 3 {
		t.Fatalf("b stores %d cells after its pass, want 3 (the old version is a's to collect)", n)
	}
	if got := b.gcRecords(t, mb); strings.Join(got, " ") != "/gc-age" {
		t.Fatalf("b's GC records %v, want one local gc-age", got)
	}

	a.gcPass(t)
	if got := a.gcRecords(t, ma); len(got) != 2 {
		t.Fatalf("a's GC records %v, want local gc-age and gc-versions", got)
	}
	eventually(t, "a's versions deletion on b", func() (bool, string) {
		got := b.gcRecords(t, mb)
		return strings.Join(got, " ") == "/gc-age a/gc-versions", fmt.Sprint(got)
	})
	if n := b.storedCells(t, mb); n != 2 {
		t.Errorf("b stores %d cells, want 2", n)
	}
	eventually(t, "convergence", converged(t, "t", a, b))
	if got := a.gcRecords(t, ma); strings.Join(got, " ") != "/gc-age /gc-versions" && strings.Join(got, " ") != "/gc-versions /gc-age" {
		t.Errorf("a's GC records %v: nothing of b's came back", got)
	}
	if n := testutil.ToFloat64(a.srv.repl.GCShipped("t")); n != 1 {
		t.Errorf("a shipped %v GC deletes, want 1", n)
	}
	if n := testutil.ToFloat64(b.srv.repl.GCShipped("t")); n != 0 {
		t.Errorf("b shipped %v GC deletes, want 0", n)
	}
	if n := testutil.ToFloat64(b.srv.repl.GCApplied("a", "t")); n != 1 {
		t.Errorf("b applied %v GC deletes from a, want 1", n)
	}
	if n := testutil.ToFloat64(a.srv.repl.GCApplied("b", "t")); n != 0 {
		t.Errorf("a applied %v GC deletes from b, want 0", n)
	}

	// b's change stream, read through the Data API, shows a's deletion as
	// GARBAGE_COLLECTION from a and its own age collection with no source.
	conn, err := grpc.NewClient(b.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	changes, err := readStream(t, btpb.NewBigtableClient(conn), &btpb.ReadChangeStreamRequest{
		TableName: tableName("t"), Partition: wholeTable(),
		StartFrom: &btpb.ReadChangeStreamRequest_StartTime{StartTime: timestamppb.New(start)},
		EndTime:   timestamppb.New(time.Now()),
	})
	if err != nil {
		t.Fatal(err)
	}
	var gc []string
	for _, ch := range changes {
		switch ch.GetType() {
		case btpb.ReadChangeStreamResponse_DataChange_GARBAGE_COLLECTION:
			gc = append(gc, "src="+ch.GetSourceClusterId())
		case btpb.ReadChangeStreamResponse_DataChange_USER:
			if ch.GetSourceClusterId() != "a" {
				t.Errorf("user change from %q, want a", ch.GetSourceClusterId())
			}
		}
	}
	if strings.Join(gc, " ") != "src= src=a" {
		t.Errorf("b's GC changes %v, want its own (no source) then a's", gc)
	}
}

// TestReplicatedMaxAgeRaiseLimitThroughTheAdminAPI: on a replicated table,
// SetGCPolicy may raise a max age by exactly 90 days; 91 is
// FAILED_PRECONDITION. GcStatus shows each cluster's age cutoff.
func TestReplicatedMaxAgeRaiseLimitThroughTheAdminAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := startCluster(t, "a", "", "")
	b := startCluster(t, "b", a.srv.Addr(), "")
	day := 24 * time.Hour
	if err := a.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", ColumnFamilies: map[string]bigtable.Family{
		"f": {GCPolicy: bigtable.MaxAgePolicy(10 * day)},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := a.admin.SetGCPolicy(ctx, "t", "f", bigtable.MaxAgePolicy(100*day)); err != nil {
		t.Fatalf("a 90-day raise: %v", err)
	}
	err := a.admin.SetGCPolicy(ctx, "t", "f", bigtable.MaxAgePolicy(191*day))
	wantCode(t, err, codes.FailedPrecondition)
	if !strings.Contains(err.Error(), "90 days") || !strings.Contains(err.Error(), "100d") || !strings.Contains(err.Error(), "191d") {
		t.Errorf("message %q", err)
	}
	// The 90-day raise reaches b.
	eventually(t, "the raise on b", func() (bool, string) {
		m, ok := b.meta(t, "t")
		if !ok {
			return false, "no table"
		}
		f, _ := m.Family("f")
		return f.GC.MaxMaxAge() == 100*day, f.GC.String()
	})
	// From b too, the next raise is bounded.
	wantCode(t, b.admin.SetGCPolicy(ctx, "t", "f", bigtable.NoGcPolicy()), codes.FailedPrecondition)

	b.gcPass(t)
	st, err := ebbadminpb.NewEbbAdminClient(dialPeer(t, b.srv.Addr())).GcStatus(ctx, &ebbadminpb.GcStatusRequest{Project: testProject, Instance: testInstance})
	if err != nil {
		t.Fatal(err)
	}
	tbls := st.GetTables()
	if len(tbls) != 1 {
		t.Fatalf("GcStatus tables %v", st)
	}
	cut := tbls[0].GetFamilies()[0].GetAgeCutoff()
	ts, err := time.Parse(time.RFC3339Nano, cut)
	if err != nil || time.Since(ts) < 100*day || time.Since(ts) > 100*day+time.Minute {
		t.Errorf("age_cutoff %q (%v), want about 100 days ago", cut, err)
	}
}

func dialPeer(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestGCLeaderFailsOver: when the leader stops answering, the next cluster
// takes over versions GC instead of leaving it stalled. b judges a's health
// on a fake clock, so the silence that makes it take over passes at once.
func TestGCLeaderFailsOver(t *testing.T) {
	t.Parallel()
	a := startCluster(t, "a", "", "")
	fake := clock.NewFake(time.Now())
	b := startClusterOn(t, "b", a.srv.Addr(), "", fake)
	eventually(t, "a leads GC", func() (bool, string) { return !b.srv.isGCLeader(), "b leads" })
	a.stop()
	fake.Advance(peerHealthyWithin - time.Millisecond)
	if b.srv.isGCLeader() {
		t.Fatal("b took over before a had been silent for peerHealthyWithin")
	}
	fake.Advance(2 * time.Millisecond)
	eventually(t, "b takes over", func() (bool, string) { return b.srv.isGCLeader(), "b does not lead" })
}
