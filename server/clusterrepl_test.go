package server

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/collector"
	"github.com/ebbtable/ebbtable/server/clusterpb"
)

// TestReplicationFromClusterOfNodes: cluster a has three nodes (etcd,
// shared storage), cluster b one process that joins a through node n1.
// Rows written through every node of a before the join are copied; rows
// written, overwritten and deleted through any node of a afterwards reach
// b; and after a tablet moves from n1 to n2, a write through n2 that
// overwrites a cell n1 wrote wins on b too, although n1's clock runs 1.5 s
// ahead of n2's (the move carries n1's commit floor to n2). The lead only
// has to outlast the move between the two writes (tens of milliseconds);
// every wait for b below lasts about as long, as n1's writes wait for the
// other nodes' closed timestamps to pass them.
func TestReplicationFromClusterOfNodes(t *testing.T) {
	t.Parallel()
	sc := newScaleCluster(t, &scaleCluster{})
	ahead := clock.NewShifted(time.Now().Add(1500 * time.Millisecond))
	for _, id := range []string{"n1", "n2", "n3"} {
		sc.tune = func(o *Options) {
			o.ClusterID = "a"
			if id == "n1" {
				o.Clock = ahead
			}
		}
		n := sc.start(t, id, filepath.Join(t.TempDir(), id))
		t.Cleanup(n.stop)
	}
	eventually(t, "every node to see the others", func() (bool, string) {
		got := len(sc.nodes["n1"].srv.ClusterMember().Nodes())
		return got == 3, fmt.Sprintf("%d nodes", got)
	})
	ctx := context.Background()
	sc.createTable(t, "n2", "g", "n", "t")
	tabs, err := sc.nodes["n1"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string]bool{}
	for _, tb := range tabs.Tablets {
		owners[tb.Owner] = true
	}
	if len(owners) != 3 {
		t.Fatalf("tablets are not spread over the three nodes: %+v", tabs.Tablets)
	}
	write := func(via, row, val string) {
		t.Helper()
		if err := writeScale(t, sc.nodes[via].client.Open("t"), row, val); err != nil {
			t.Fatalf("write %s through %s: %v", row, via, err)
		}
	}
	for i, l := range letters() {
		write([]string{"n1", "n2", "n3"}[i%3], l, "v0-"+l)
	}

	b := startCluster(t, "b", sc.nodes["n1"].srv.Addr(), "")
	want := map[string]string{}
	for _, l := range letters() {
		want[l] = "v0-" + l
	}
	seen := func() (bool, string) {
		got := map[string]string{}
		err := b.client.Open("t").ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
			got[r.Key()] = string(r["f"][0].Value)
			return true
		})
		if err != nil {
			return false, err.Error()
		}
		var diff []string
		for k, v := range want {
			if got[k] != v {
				diff = append(diff, fmt.Sprintf("%s: want %q, got %q", k, v, got[k]))
			}
		}
		for k, v := range got {
			if _, ok := want[k]; !ok {
				diff = append(diff, fmt.Sprintf("%s: want none, got %q", k, v))
			}
		}
		sort.Strings(diff)
		return len(diff) == 0, strings.Join(diff, "; ")
	}
	eventually(t, "b to hold the copy", seen)

	// Writes, overwrites and deletes through every node.
	for i, l := range letters() {
		via := []string{"n3", "n1", "n2"}[i%3]
		switch i % 4 {
		case 0:
			write(via, l, "v1-"+l)
			want[l] = "v1-" + l
		case 1:
			write(via, l+"x", "new-"+l)
			want[l+"x"] = "new-" + l
		case 2:
			m := bigtable.NewMutation()
			m.DeleteRow()
			if err := sc.nodes[via].client.Open("t").Apply(ctx, l, m); err != nil {
				t.Fatal(err)
			}
			delete(want, l)
		}
	}
	eventually(t, "b to follow writes and deletes through every node", seen)

	// A tablet n1 owns moves to n2; n2 overwrites one of its cells at once.
	var moved *clusterpb.Tablet
	for _, tb := range tabs.Tablets {
		if tb.Owner == "n1" {
			moved = tb
			break
		}
	}
	if moved == nil {
		t.Fatalf("n1 owns no tablet: %+v", tabs.Tablets)
	}
	row := string(moved.Start) + "0moved" // in the tablet, whatever its start
	write("n1", row, "before the move")
	if _, err := sc.nodes["n3"].ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: moved.Id, To: "n2"}); err != nil {
		t.Fatal(err)
	}
	write("n2", row, "after the move")
	want[row] = "after the move"
	m := bigtable.NewMutation()
	m.DeleteRow()
	if err := sc.nodes["n2"].client.Open("t").Apply(ctx, string(moved.Start)+"0gone", m); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b to follow writes after a move", seen)
	// n1's write is held back until every node's closed timestamp passes
	// it (n1 runs ahead): wait until b applied a through it, then look again.
	floor := sc.nodes["n1"].srv.Engine().ClosedTimestamp()
	eventually(t, "b to apply a through n1's clock", func() (bool, string) {
		got := b.srv.repl.Through("a")
		return got > floor, fmt.Sprintf("through %d, want past %d", got, floor)
	})
	if ok, diff := seen(); !ok {
		t.Fatalf("after b applied a through n1's last commit: %s", diff)
	}
	if _, vals := readScale(t, sc.nodes["n3"]); vals[row] != "after the move" {
		t.Fatalf("a itself reads %q", vals[row])
	}

	// Versions GC: a (the leader, "a" < "b") collects on the nodes that own
	// the rows, and b applies those deletions.
	if err := sc.nodes["n3"].admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "v", SplitKeys: []string{"g", "n", "t"},
		ColumnFamilies: map[string]bigtable.Family{"ver": {GCPolicy: bigtable.MaxVersionsPolicy(1)}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "table v on b", func() (bool, string) { _, ok := b.meta(t, "v"); return ok, "" })
	mb, _ := b.meta(t, "v")
	for i, l := range letters() {
		mut := bigtable.NewMutation()
		mut.Set("ver", "c", 1000, []byte("old"))
		mut.Set("ver", "c", 2000, []byte("new"))
		if err := sc.nodes[[]string{"n1", "n2", "n3"}[i%3]].client.Open("v").Apply(ctx, l, mut); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "every version on b", func() (bool, string) { n := b.storedCells(t, mb); return n == 52, fmt.Sprint(n) })
	eventually(t, "a to lead versions GC, on every node", func() (bool, string) {
		var lead []string
		for _, id := range []string{"n1", "n2", "n3"} {
			if n := sc.nodes[id]; n.srv.isGCLeader() && n.srv.peers.healthy("b") {
				lead = append(lead, id)
			}
		}
		return len(lead) == 3 && !b.srv.isGCLeader(), fmt.Sprintf("leading and hearing from b: %v, b leads: %v", lead, b.srv.isGCLeader())
	})
	for _, id := range []string{"n1", "n2", "n3"} {
		if _, err := sc.nodes[id].srv.collector.RunPass(ctx, collector.Selector{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "a's versions collections on b", func() (bool, string) { n := b.storedCells(t, mb); return n == 26, fmt.Sprint(n) })
}
