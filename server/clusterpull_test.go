package server

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/collector"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"github.com/ebbtable/ebbtable/storage"
)

// dumpVia lists every cell of a table read through a client, sorted.
func dumpVia(c *bigtable.Client, name string) (string, int, error) {
	var lines []string
	err := c.Open(name).ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		for fam, items := range r {
			for _, it := range items {
				lines = append(lines, fmt.Sprintf("%s %s %s %d %s", it.Row, fam, it.Column, it.Timestamp, it.Value))
			}
		}
		return true
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n"), len(lines), err
}

// firstDiff names the first line two dumps differ at.
func firstDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range max(len(la), len(lb)) {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return fmt.Sprintf("line %d: %q vs %q", i, x, y)
		}
	}
	return ""
}

// TestReplicationIntoClusterOfNodes: cluster c has three nodes (etcd,
// shared storage, failover), cluster b one process that joins c through
// n1. Writes, overwrites and deletes made on b reach c (and c's reach b),
// read back whole through every node of c exactly as on b; across a
// tablet move and a split made while b writes; a table created on b, a
// family added and a GC rule changed there reach every node of c once,
// with b's stamps, and the schemas then stay put (no ping-pong through
// the schema log); b's versions collections (b leads GC: "b" < "c") reach
// c's owners; and after the pulling node n1 is killed, n2 pulls from the
// checkpoints in etcd and b's later writes arrive too.
func TestReplicationIntoClusterOfNodes(t *testing.T) {
	t.Parallel()
	sc := startScaleClusterTuned(t, 0, func(o *Options) {
		o.ClusterID = "c"
		o.Cluster.Failover = true
		o.Cluster.LeaseTTL = time.Second
		o.Cluster.CheckpointInterval = time.Hour
	}, "n1", "n2", "n3")
	ctx := context.Background()
	sc.createTable(t, "n2", "g", "n", "t")
	b := startCluster(t, "b", sc.nodes["n1"].srv.Addr(), "")
	live := []string{"n1", "n2", "n3"}

	var mu sync.Mutex
	want := map[string]string{} // row → value, for table t
	write := func(cl *bigtable.Client, row, val string) {
		t.Helper()
		m := bigtable.NewMutation()
		m.Set("f", "c", bigtable.Timestamp(1000), []byte(val))
		if err := cl.Open("t").Apply(ctx, row, m); err != nil {
			t.Errorf("write %s: %v", row, err)
			return
		}
		mu.Lock()
		want[row] = val
		mu.Unlock()
	}
	// same: table name reads alike through b and every live node of c,
	// and (for t) holds exactly the acknowledged writes.
	same := func(name string) func() (bool, string) {
		return func() (bool, string) {
			wb, n, err := dumpVia(b.client, name)
			if err != nil {
				return false, "b: " + err.Error()
			}
			if name == "t" {
				mu.Lock()
				var lines []string
				for row, v := range want {
					lines = append(lines, fmt.Sprintf("%s f f:c 1000 %s", row, v))
				}
				mu.Unlock()
				sort.Strings(lines)
				if w := strings.Join(lines, "\n"); w != wb {
					return false, fmt.Sprintf("b holds %d cells, want %d: %s", n, len(lines), firstDiff(w, wb))
				}
			}
			for _, id := range live {
				got, _, err := dumpVia(sc.nodes[id].client, name)
				if err != nil {
					return false, id + ": " + err.Error()
				}
				if got != wb {
					return false, fmt.Sprintf("through %s: %s", id, firstDiff(wb, got))
				}
			}
			return true, ""
		}
	}

	// 1. Writes on both sides.
	for i, l := range letters() {
		write(b.client, l+"-b", "from b "+l)
		write(sc.nodes[live[i%3]].client, l+"-c", "from c "+l)
	}
	eventually(t, "writes on b and on c everywhere", same("t"))
	if !sc.nodes["n1"].srv.cluster.pullsHere() || sc.nodes["n2"].srv.cluster.pullsHere() {
		t.Fatal("n1 should be the node that pulls")
	}

	// 1b. WaitForReplication through the official admin client: on b it
	// returns once c applied b's writes (c answers from its checkpoints in
	// etcd), on a node of c once b applied c's and c applied b's.
	for i, l := range letters()[:6] {
		write(b.client, l+"-wait", "b")
		write(sc.nodes[live[i%3]].client, l+"-waitc", "c")
	}
	for _, adm := range []*bigtable.AdminClient{b.admin, sc.nodes["n3"].admin} {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := adm.WaitForReplication(wctx, "t")
		cancel()
		if err != nil {
			t.Fatalf("WaitForReplication: %v", err)
		}
	}
	if ok, diff := same("t")(); !ok {
		t.Fatalf("after WaitForReplication on b and on n3: %s", diff)
	}

	// 2. Overwrites and deletes on b of cells either side wrote.
	for i, l := range letters() {
		switch i % 4 {
		case 0:
			write(b.client, l+"-c", "b overwrote "+l)
		case 1:
			m := bigtable.NewMutation()
			m.DeleteRow()
			if err := b.client.Open("t").Apply(ctx, l+"-c", m); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			delete(want, l+"-c")
			mu.Unlock()
		case 2:
			m := bigtable.NewMutation()
			m.DeleteCellsInColumn("f", "c")
			if err := b.client.Open("t").Apply(ctx, l+"-b", m); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			delete(want, l+"-b")
			mu.Unlock()
		}
	}
	eventually(t, "b's overwrites and deletes on c", same("t"))

	// 3. A tablet moves and another splits while b writes: b writes
	// until both are done (at least 30 rows, at most 300), so the writes
	// overlap them however fast the machine is.
	done, moved := make(chan struct{}), make(chan struct{})
	written := 0
	go func() {
		defer close(done)
		for i := range 300 {
			if i >= 30 {
				select {
				case <-moved:
					written = i
					return
				default:
				}
			}
			l := letters()[i%26]
			write(b.client, fmt.Sprintf("%sw%03d", l, i), fmt.Sprint("w", i))
		}
		written = 300
	}()
	tabs, err := sc.nodes["n1"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tabs.Tablets {
		if tb.Owner == "n2" {
			if _, err := sc.nodes["n3"].ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: tb.Id, To: "n3"}); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if _, err := sc.nodes["n1"].ops.SplitTablet(ctx, &clusterpb.SplitTabletRequest{Table: scaleTable, Key: []byte("q")}); err != nil {
		t.Fatal(err)
	}
	close(moved)
	<-done
	t.Logf("b wrote %d rows during the move and the split", written)
	eventually(t, "b's writes during a move and a split on c", same("t"))

	// 3b. Last-writer-wins across a move: c deletes a row while b, not
	// yet pulled from, writes to it (earlier); the row's tablet then moves
	// before c applies b's write. The delete's tombstone moves with the
	// span, so b's older write stays deleted on c as it is on b.
	row := "h-b"
	write(b.client, row, "kept until c deletes it")
	eventually(t, "the row on c", same("t"))
	sc.nodes["n1"].srv.repl.Pause("b")
	lm := bigtable.NewMutation()
	lm.Set("f", "late", 1000, []byte("older than c's delete"))
	if err := b.client.Open("t").Apply(ctx, row, lm); err != nil {
		t.Fatal(err)
	}
	dm := bigtable.NewMutation()
	dm.DeleteRow()
	if err := sc.nodes["n3"].client.Open("t").Apply(ctx, row, dm); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	delete(want, row)
	mu.Unlock()
	tabs, err = sc.nodes["n1"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tabs.Tablets {
		if string(tb.Start) <= row && (len(tb.End) == 0 || row < string(tb.End)) {
			to := "n1"
			if tb.Owner == "n1" {
				to = "n2"
			}
			if _, err := sc.nodes["n1"].ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: tb.Id, To: to}); err != nil {
				t.Fatal(err)
			}
		}
	}
	sc.nodes["n1"].srv.repl.Resume("b")
	eventually(t, "c's delete and b's older write settled alike on both sides", same("t"))

	// 4. Schema changes on b: a table, a family, a GC rule.
	if err := b.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "s",
		ColumnFamilies: map[string]bigtable.Family{"f": {GCPolicy: bigtable.MaxVersionsPolicy(3)}}}); err != nil {
		t.Fatal(err)
	}
	for _, l := range letters() {
		m := bigtable.NewMutation()
		m.Set("f", "q", 1000, []byte("s-"+l))
		if err := b.client.Open("s").Apply(ctx, l, m); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "table s made on b, with its rows, on c", same("s"))
	if err := b.admin.CreateColumnFamily(ctx, "s", "g"); err != nil {
		t.Fatal(err)
	}
	if err := b.admin.SetGCPolicy(ctx, "s", "f", bigtable.MaxVersionsPolicy(1)); err != nil {
		t.Fatal(err)
	}
	m := bigtable.NewMutation()
	m.Set("g", "q", 1000, []byte("in g"))
	if err := b.client.Open("s").Apply(ctx, "a", m); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b's new family and rule on every node of c", func() (bool, string) {
		mb, _ := b.meta(t, "s")
		fb, _ := mb.Family("f")
		if fb.GC.String() != bigtable.MaxVersionsPolicy(1).String() && fb.GC.String() != "versions() > 1" {
			return false, "b's own rule: " + fb.GC.String()
		}
		for _, id := range live {
			mc, err := sc.nodes[id].srv.engine.Table(mb.Instance, "s")
			if err != nil {
				return false, id + ": " + err.Error()
			}
			f, ok := mc.Family("f")
			if _, hasG := mc.Family("g"); !ok || !hasG || f.GC.String() != fb.GC.String() || mc.Stamp != mb.Stamp {
				return false, fmt.Sprintf("%s: %+v stamp %v, b's stamp %v", id, mc.Families, mc.Stamp, mb.Stamp)
			}
		}
		return same("s")()
	})
	// No ping-pong: once settled, further pulls both ways change no schema.
	seq := sc.nodes["n1"].srv.cluster.m.SchemaSeq()
	pullsLater(t, b, "c", 3)
	from := sc.nodes["n1"].srv.repl.Through("b")
	eventually(t, "three more pulls by c", func() (bool, string) {
		return sc.nodes["n1"].srv.repl.Through("b") > from, ""
	})
	if got := sc.nodes["n1"].srv.cluster.m.SchemaSeq(); got != seq {
		t.Fatalf("c's schema log grew from %d to %d with nothing changed", seq, got)
	}

	// 5. Versions GC: b leads; its collections reach c's owners.
	if err := b.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "v", SplitKeys: []string{"g", "n", "t"},
		ColumnFamilies: map[string]bigtable.Family{"ver": {GCPolicy: bigtable.MaxVersionsPolicy(1)}}}); err != nil {
		t.Fatal(err)
	}
	for _, l := range letters() {
		mut := bigtable.NewMutation()
		mut.Set("ver", "c", 1000, []byte("old"))
		mut.Set("ver", "c", 2000, []byte("new"))
		if err := b.client.Open("v").Apply(ctx, l, mut); err != nil {
			t.Fatal(err)
		}
	}
	stored := func() int {
		n := 0
		for _, id := range live {
			e := sc.nodes[id].srv.engine
			mv, err := e.Table("projects/"+testProject+"/instances/"+testInstance, "v")
			if err != nil {
				return -1
			}
			it, err := e.RawIter(storage.TablePrefix(mv.ID), storage.TableEnd(mv.ID))
			if err != nil {
				t.Fatal(err)
			}
			for it.First(); it.Valid(); it.Next() {
				n++
			}
			it.Close()
		}
		return n
	}
	eventually(t, "every version on c", func() (bool, string) { n := stored(); return n == 52, fmt.Sprint(n) })
	eventually(t, "b to lead versions GC and hear from c", func() (bool, string) {
		return b.srv.isGCLeader() && b.srv.peers.healthy("c") && !sc.nodes["n2"].srv.isGCLeader(), ""
	})
	if _, err := b.srv.collector.RunPass(ctx, collector.Selector{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b's versions collections on c", func() (bool, string) { n := stored(); return n == 26, fmt.Sprint(n) })

	// 6. The pulling node dies: n2 pulls from the checkpoints in etcd.
	for _, l := range letters() {
		write(b.client, l+"-before-crash", "x")
	}
	sc.nodes["n1"].crash()
	live = []string{"n2", "n3"}
	for _, l := range letters() {
		write(b.client, l+"-after-crash", "y")
	}
	eventually(t, "n2 to pull for c", func() (bool, string) {
		return sc.nodes["n2"].srv.cluster.pullsHere(), ""
	})
	// Room for n1's lease to expire and its tablets to be taken over.
	testkit.Eventually(t, "b's writes around the crash of c's puller, through n2 and n3", 45*time.Second, same("t"))
}
