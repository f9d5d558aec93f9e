package server

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
)

func ownersOf(t *testing.T, n *scaleNode, tbl string) string {
	t.Helper()
	tabs, err := n.ops.ListTablets(context.Background(), &clusterpb.ListTabletsRequest{Table: scaleInstance + "/tables/" + tbl})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tb := range tabs.Tablets {
		out = append(out, fmt.Sprintf("[%s,%s)%s", tb.Start, tb.End, tb.Owner))
	}
	return strings.Join(out, " ")
}

// fullRound makes a node write a full checkpoint round now.
func fullRound(t *testing.T, n *scaleNode) {
	t.Helper()
	f := n.srv.cluster.fail
	f.roundMu.Lock()
	f.lastAt = time.Time{}
	f.roundMu.Unlock()
	if err := f.checkpoint(context.Background(), nil, true); err != nil {
		t.Fatal(err)
	}
}

// readFRows reads table tbl through n: row → value of its newest f:c cell.
func readFRows(t *testing.T, n *scaleNode, tbl string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := n.client.Open(tbl).ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		for _, c := range r["f"] {
			out[r.Key()] = string(c.Value)
			break
		}
		if len(r["f"]) == 0 {
			out[r.Key()] = "(no f)"
		}
		return true
	})
	if err != nil {
		t.Fatalf("read %s through %s: %v", tbl, n.id, err)
	}
	return out
}

// TestFailoverGaps kills a node whose tablets hold what a take-over used
// to lose or choke on, and checks each is rebuilt on the survivors:
//
//   - a family dropped after the node's last checkpoint (the take-over
//     was refused: the checkpoint names a family the taker lacks);
//   - a row-range drop the taking node applies to its engine while it
//     takes over, marked applied only after (the ingest undid it);
//   - a raw-cell repair and replication tombstones (outside the log);
//   - a table deleted before the node died and undeleted after (its
//     checkpoint left the catalog, its log records were truncated);
//
// and that the dead node is then given up: its schema-log progress mark
// is forgotten, its shared SSTables' reference markers released (objects
// the survivors use stay), its old data directory refused. A node started
// without --failover is refused by the cluster (the setting is
// cluster-wide).
func TestFailoverGaps(t *testing.T) {
	t.Parallel()
	sc := startScaleClusterTuned(t, 0, func(o *Options) {
		o.Cluster.Failover = true
		o.Cluster.LeaseTTL = time.Second
		o.Cluster.CheckpointInterval = time.Hour
		o.Cluster.ReleaseDeadAfter = time.Nanosecond // released as soon as it owns nothing
	}, "n1", "n2", "n3")
	ctx := context.Background()
	n1, n2, n3 := sc.nodes["n1"], sc.nodes["n2"], sc.nodes["n3"]

	// --failover is cluster-wide: a node without it is refused.
	{
		srv, err := New(Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: filepath.Join(t.TempDir(), "n4"), Cluster: &ClusterOptions{
			Etcd: []string{sc.etcd}, Prefix: sc.prefix, NodeID: "n4", LeaseTTL: time.Second, SharedStorage: "file://" + sc.shared}})
		if err == nil {
			err = srv.Start()
			srv.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "failover=true") {
			t.Fatalf("a node without --failover joined a failover cluster: %v", err)
		}
	}

	for _, tbl := range []string{"t", "u"} {
		if err := n1.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: tbl, SplitKeys: []string{"g", "p"},
			ColumnFamilies: map[string]bigtable.Family{"f": {}, "g": {}}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := ownersOf(t, n1, "t") + " " + ownersOf(t, n1, "u"); !strings.Contains(got, "[p,)n3 [,g)") || strings.Count(got, "[p,)n3") != 2 {
		t.Fatalf("tablets: %s", got)
	}
	eng3 := n3.srv.Engine()
	want := map[string]string{}
	wantU := map[string]string{}
	tt, tu := n1.client.Open("t"), n1.client.Open("u")
	for i := range 60 {
		row := fmt.Sprintf("%c-%03d", 'a'+i%26, i)
		m := bigtable.NewMutation()
		m.Set("f", "c", bigtable.Timestamp(1000), []byte("v"+row))
		m.Set("g", "c", bigtable.Timestamp(1000), []byte("g"+row))
		if err := tt.Apply(ctx, row, m); err != nil {
			t.Fatal(err)
		}
		want[row] = "v" + row
		if err := writeScale(t, tu, row, "u"+row); err != nil {
			t.Fatal(err)
		}
		wantU[row] = "u" + row
	}
	fullRound(t, n3)
	n3.srv.cluster.fail.loopPaused.Store(true)
	// Table u is deleted; a full round on n3 later truncates its log past
	// u's records: only a checkpoint of the deleted table keeps them.
	if err := n1.admin.DeleteTable(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "n3 to apply the delete", 10*time.Second, func() (bool, string) {
		_, err := eng3.Table(scaleInstance, "u")
		return err != nil, fmt.Sprint(err)
	})
	// From here deletes on n3 leave replication tombstones (set now: a
	// replicating engine keeps no deleted table for an undelete). One
	// before the checkpoint (its tombstone beside it) and one after (its
	// tombstone in the log only).
	if err := eng3.SetReplicating("c1"); err != nil {
		t.Fatal(err)
	}
	if err := tt.Apply(ctx, "q-002", deleteRow()); err != nil {
		t.Fatal(err)
	}
	delete(want, "q-002")
	if err := eng3.Compact(ctx, []byte{0}, []byte{0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	fullRound(t, n3)
	cat, _, err := storage.ReadCatalog(n3.srv.cluster.store, "n3")
	if err != nil {
		t.Fatal(err)
	}
	deletedKept, tombsKept := false, false
	for _, e := range cat.Entries {
		deletedKept = deletedKept || (e.Deleted && strings.HasSuffix(e.Table, "/u"))
		tombsKept = tombsKept || e.Tombstones != ""
	}
	if !deletedKept || !tombsKept {
		t.Errorf("n3's catalog after u was deleted: %+v", cat.Entries)
	}
	if err := tt.Apply(ctx, "r-017", deleteRow()); err != nil {
		t.Fatal(err)
	}
	delete(want, "r-017")
	// A repair only the log holds.
	mt, err := eng3.Table(scaleInstance, "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng3.RepairCell(mt, table.RawCell{Row: []byte("q-repair"), Family: "f", Qualifier: []byte("c"), Timestamp: 1000,
		Value: []byte("repaired"), Stamp: storage.Stamp{Commit: time.Now().UnixMicro(), Cluster: "peer"}}); err != nil {
		t.Fatal(err)
	}
	want["q-repair"] = "repaired"
	tombs3, err := eng3.SpanTombstones(scaleInstance, "t", []byte("p"), nil)
	if err != nil || len(tombs3) == 0 {
		t.Fatalf("n3's tombstones: %x %v", tombs3, err)
	}
	// Family g is dropped after n3's checkpoint, which names it.
	if err := n1.admin.DeleteColumnFamily(ctx, "t", "g"); err != nil {
		t.Fatal(err)
	}

	// A row-range drop is issued while the taking node has excised the
	// span and not yet ingested it; the survivors hold it applied to
	// their engines but not marked applied until n3's tablet is taken
	// over (or 3 s pass: the taker keeps it out until its own drop check).
	appliedOn := map[string]chan struct{}{"n1": make(chan struct{}, 1), "n2": make(chan struct{}, 1)}
	var dropOnce sync.Once
	dropped := make(chan error, 1)
	for _, n := range []*scaleNode{n1, n2} {
		id := n.id
		hook := func(e clusteretcd.SchemaEntry) {
			if e.Method != "DropRowRange" {
				return
			}
			appliedOn[id] <- struct{}{}
			timeout := time.After(3 * time.Second)
			for {
				for _, n := range []*scaleNode{n1, n2} {
					if d, ok := n.srv.cluster.m.Directory(scaleInstance + "/tables/t"); ok && !strings.Contains(fmt.Sprint(d.Tablets), "n3") {
						return
					}
				}
				select {
				case <-timeout:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
		n.srv.cluster.appliedHook.Store(&hook)
		stage := func(s string) {
			if s != "excised" {
				return
			}
			dropOnce.Do(func() {
				go func() { dropped <- n1.admin.DropRowRange(ctx, "t", "s-") }()
				select {
				case <-appliedOn[id]:
				case <-time.After(2 * time.Second):
				}
			})
		}
		n.srv.cluster.fail.stageHook.Store(&stage)
	}
	// The survivors' collectors swept g's cells already (as if): g is no
	// longer among their dropped families.
	for _, n := range []*scaleNode{n1, n2} {
		if err := n.srv.Engine().ForgetDropped(scaleInstance, "t", []uint32{2}); err != nil {
			t.Fatal(err)
		}
	}
	creator3 := n3.srv.cluster.creator
	n3.crash()
	for r := range want {
		if strings.HasPrefix(r, "s-") {
			delete(want, r)
		}
	}
	testkit.Eventually(t, "n3's tablet of t to be taken over", 30*time.Second, func() (bool, string) {
		got := ownersOf(t, n1, "t")
		if strings.Contains(got, "n3") {
			return false, got + "; " + failoverState(n1, n2)
		}
		return true, got
	})
	if err := <-dropped; err != nil {
		t.Fatal(err)
	}
	for _, n := range []*scaleNode{n1, n2} {
		n.srv.cluster.appliedHook.Store(nil)
		n.srv.cluster.fail.stageHook.Store(nil)
	}
	check := func(via *scaleNode, tbl string, want map[string]string) {
		t.Helper()
		got := readFRows(t, via, tbl)
		bad := 0
		for r, v := range want {
			if got[r] != v {
				if bad < 5 {
					t.Errorf("%s through %s: %s = %q, want %q", tbl, via.id, r, got[r], v)
				}
				bad++
			}
		}
		for r := range got {
			if _, ok := want[r]; !ok {
				if bad < 5 {
					t.Errorf("%s through %s: row %s (deleted or dropped) is back", tbl, via.id, r)
				}
				bad++
			}
		}
	}
	check(n1, "t", want)
	check(n2, "t", want)
	// The taker has n3's tombstones, and g's cells marked for collection.
	for _, n := range []*scaleNode{n1, n2} {
		if !strings.Contains(ownersOf(t, n1, "t"), "[p,)"+n.id) {
			continue
		}
		got, err := n.srv.Engine().SpanTombstones(scaleInstance, "t", []byte("p"), nil)
		if err != nil || string(got) != string(tombs3) {
			t.Errorf("tombstones of [p, ) on %s: %x (%v), want %x", n.id, got, err, tombs3)
		}
		// g (id 2) is marked dropped again, or the collector swept the
		// cells the checkpoint brought back already.
		m, _ := n.srv.Engine().Table(scaleInstance, "t")
		if !slices.Contains(m.DroppedFamilies, 2) {
			gCells := 0
			withG := &table.Meta{ID: m.ID, Families: []table.Family{{ID: 2, Name: "g"}}}
			if err := n.srv.Engine().RawCells(withG, []byte("p"), nil, func(c table.RawCell) error {
				if c.Family == "g" {
					gCells++
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if gCells > 0 {
				t.Errorf("%s holds %d cells of dropped family g and does not list it as dropped: %v", n.id, gCells, m.DroppedFamilies)
			}
		}
	}
	// Once it owns nothing, n3's progress mark goes: the schema log no
	// longer waits for it. Its objects stay while u may be undeleted.
	testkit.Eventually(t, "n3's progress mark to go", 30*time.Second, func() (bool, string) {
		p, _, err := n1.srv.cluster.m.Progress(ctx)
		_, has := p["n3"]
		return err == nil && !has, fmt.Sprint(p, err)
	})
	if _, err := storage.GetObject(ctx, n1.srv.cluster.store, storage.ReleasedMarker("n3")); err == nil {
		t.Error("n3 released while a deleted table of it may be undeleted")
	}
	// Undeleted, u's tablet of n3 is rebuilt from the deleted table's
	// checkpoint.
	if _, err := n2.rawAdmin().UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: scaleInstance + "/tables/u"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "n3's tablet of u to be taken over", 30*time.Second, func() (bool, string) {
		got := ownersOf(t, n1, "u")
		if strings.Contains(got, "n3") {
			return false, got + "; " + failoverState(n1, n2)
		}
		return true, got
	})
	check(n2, "u", wantU)
	// Then n3 is released: no reference marker of it is left, and what
	// the survivors use is still there (a compaction reads it all).
	testkit.Eventually(t, "n3 to be released", 30*time.Second, func() (bool, string) {
		if _, err := storage.GetObject(ctx, n1.srv.cluster.store, storage.ReleasedMarker("n3")); err != nil {
			return false, fmt.Sprint(err)
		}
		names, err := n1.srv.cluster.store.List("", "")
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, name := range names {
			if strings.Contains(name, fmt.Sprintf(".ref.%d.", creator3)) || strings.HasPrefix(name, "ebbtable-ckpt-n3-") ||
				strings.HasPrefix(name, "ebbtable-log-n3-") || strings.HasPrefix(name, "ebbtable-catalog-n3-") {
				left = append(left, name)
			}
		}
		return len(left) == 0, fmt.Sprintf("left in the shared store: %v", left)
	})
	for _, n := range []*scaleNode{n1, n2} {
		if err := n.srv.Engine().Compact(ctx, []byte{0}, []byte{0xff, 0xff}); err != nil {
			t.Fatalf("compact %s after n3's release: %v", n.id, err)
		}
	}
	check(n1, "t", want)
	check(n1, "u", wantU)
	// n3's old data directory is refused.
	srv, err := New(Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: n3.dir, Cluster: &ClusterOptions{
		Etcd: []string{sc.etcd}, Prefix: sc.prefix, NodeID: "n3", LeaseTTL: time.Second, SharedStorage: "file://" + sc.shared, Failover: true}})
	if err == nil {
		srv.Close()
		t.Fatal("n3 restarted on its old data directory after its release")
	}
	if !strings.Contains(err.Error(), "must not be used again") {
		t.Errorf("n3 restarted on its old data directory: %v", err)
	}
}
