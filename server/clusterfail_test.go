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
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"github.com/ebbtable/ebbtable/storage"
)

// startFailoverCluster is a three-node cluster with automatic failover:
// short leases, checkpoints only when asked (an hour apart) or when the
// tablets change.
func startFailoverCluster(t *testing.T) *scaleCluster {
	t.Helper()
	return startScaleClusterTuned(t, 0, func(o *Options) {
		o.Cluster.Failover = true
		o.Cluster.LeaseTTL = time.Second
		o.Cluster.CheckpointInterval = time.Hour
	}, "n1", "n2", "n3")
}

// crash stops a node as kill -9 would for the cluster: its lease is left
// to expire (not revoked) and nothing of it is used again; its disk is
// never reopened.
func (n *scaleNode) crash() {
	n.srv.cluster.m.Abandon()
	n.stop()
}

func owners(t *testing.T, n *scaleNode) string {
	t.Helper()
	tabs, err := n.ops.ListTablets(context.Background(), &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tb := range tabs.Tablets {
		out = append(out, fmt.Sprintf("[%s,%s)%s", tb.Start, tb.End, tb.Owner))
	}
	return strings.Join(out, " ")
}

// A node killed without leaving: once its lease expires, the survivors
// take its tablets over, rebuilt from its checkpoint (shared SSTables,
// some compacted away on it since, held by the checkpoint) and its commit
// log (writes only its memtable held), and every acknowledged write is
// read back through every survivor, while a writer kept writing.
func TestFailoverNodeKilled(t *testing.T) {
	t.Parallel()
	sc := startFailoverCluster(t)
	sc.createTable(t, "n1", "g", "p")
	ctx := context.Background()
	n3 := sc.nodes["n3"]
	if got := owners(t, sc.nodes["n1"]); got != "[,g)n1 [g,p)n2 [p,)n3" {
		t.Fatalf("tablets: %s", got)
	}
	var mu sync.Mutex
	acked := map[string]string{}
	write := func(tbl *bigtable.Table, row, val string) error {
		err := writeScale(t, tbl, row, val)
		if err == nil {
			mu.Lock()
			acked[row] = val
			mu.Unlock()
		}
		return err
	}
	tbl := sc.nodes["n1"].client.Open("t")
	// Batch A (four rows per first letter: every tablet gets some): in
	// n3's shared SSTables after a compaction, then checkpointed (by
	// reference).
	for i := range 104 {
		if err := write(tbl, fmt.Sprintf("%c-a%03d", 'a'+i%26, i), "A"); err != nil {
			t.Fatal(err)
		}
	}
	eng3 := n3.srv.Engine()
	if err := eng3.Compact(ctx, []byte{0}, []byte{0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	f3 := n3.srv.cluster.fail
	f3.roundMu.Lock()
	f3.lastAt = time.Time{} // a full round now
	f3.roundMu.Unlock()
	if err := n3.srv.cluster.fail.checkpoint(ctx, nil, true); err != nil {
		t.Fatal(err)
	}
	cat, ok, err := storage.ReadCatalog(n3.srv.cluster.store, "n3")
	if err != nil || !ok || len(cat.Entries) != 1 {
		t.Fatalf("n3's catalog: %+v %v %v", cat, ok, err)
	}
	// Batch B overwrites some of A and compacts again (the checkpoint's
	// shared SSTables are obsolete on n3 now, but held); batch C stays in
	// n3's memtable and commit log only.
	for i := range 104 {
		if i%3 == 0 {
			if err := write(tbl, fmt.Sprintf("%c-a%03d", 'a'+i%26, i), "B"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := eng3.Compact(ctx, []byte{0}, []byte{0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	for i := range 78 {
		if err := write(tbl, fmt.Sprintf("%c-c%03d", 'a'+i%26, i), "C"); err != nil {
			t.Fatal(err)
		}
	}
	// A delete that only the log holds must stay deleted.
	mu.Lock()
	delete(acked, "z-a025")
	mu.Unlock()
	if err := tbl.Apply(ctx, "z-a025", deleteRow()); err != nil {
		t.Fatal(err)
	}
	// Tablet [g, p) moves to n3 (which checkpoints it before the flip: it
	// is in none of n3's log), n3's tablet splits (a directory change
	// only), and more writes land everywhere. n3's checkpoint loop is
	// paused: it dies before it would catch up with either change, so the
	// move's own checkpoint and the one from before the split must do.
	n3.srv.cluster.fail.loopPaused.Store(true)
	tabs, err := sc.nodes["n1"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.nodes["n1"].ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: tabs.Tablets[1].Id, To: "n3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.nodes["n2"].ops.SplitTablet(ctx, &clusterpb.SplitTabletRequest{Table: scaleTable, Key: []byte("t")}); err != nil {
		t.Fatal(err)
	}
	// The new right half moves on to n1: n3's checkpoint of [p, ) now
	// reaches a tablet n1 serves, so n1 may not take n3's tablets over.
	// n1's view of the directory may not show n2's split yet.
	testkit.Eventually(t, "n1 lists the split's four tablets", 10*time.Second, func() (bool, string) {
		tabs, err = sc.nodes["n1"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
		if err != nil {
			return false, err.Error()
		}
		return len(tabs.Tablets) == 4, fmt.Sprintf("%d tablets", len(tabs.Tablets))
	})
	if _, err := sc.nodes["n2"].ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: tabs.Tablets[3].Id, To: "n1"}); err != nil {
		t.Fatal(err)
	}
	if got := owners(t, sc.nodes["n2"]); got != "[,g)n1 [g,p)n3 [p,t)n3 [t,)n1" {
		t.Fatalf("tablets before the crash: %s", got)
	}
	cat, _, err = storage.ReadCatalog(n3.srv.cluster.store, "n3")
	if err != nil || len(cat.Entries) != 2 {
		t.Fatalf("n3's catalog after the move: %+v %v", cat, err)
	}
	for i := range 52 {
		if err := write(tbl, fmt.Sprintf("%c-d%03d", 'a'+i%26, i), "D"); err != nil {
			t.Fatal(err)
		}
	}
	// A row-range drop n3 applies (in its log), then a write it drops not.
	if err := sc.nodes["n2"].admin.DropRowRange(ctx, "t", "y-c"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	for r := range acked {
		if strings.HasPrefix(r, "y-c") {
			delete(acked, r)
		}
	}
	mu.Unlock()
	if err := write(tbl, "y-c999", "after the drop"); err != nil {
		t.Fatal(err)
	}
	// A writer through n2 keeps going across the crash.
	stop := make(chan struct{})
	done := make(chan struct{})
	var slowest time.Duration
	go func() {
		defer close(done)
		t2 := sc.nodes["n2"].client.Open("t")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			began := time.Now()
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			m := bigtable.NewMutation()
			m.Set("f", "c", bigtable.Timestamp(1000), []byte(fmt.Sprintf("w%d", i)))
			row := fmt.Sprintf("%c-w%04d", 'a'+i%26, i)
			err := t2.Apply(wctx, row, m)
			cancel()
			if err == nil {
				mu.Lock()
				acked[row] = fmt.Sprintf("w%d", i)
				mu.Unlock()
				slowest = max(slowest, time.Since(began))
			}
		}
	}()
	waitWrites := func(n int) {
		testkit.Eventually(t, "more writes", 30*time.Second, func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			return len(acked) >= n, fmt.Sprintf("%d acked", len(acked))
		})
	}
	mu.Lock()
	before := len(acked)
	mu.Unlock()
	waitWrites(before + 25)
	n3.crash()
	// A row-range drop while n3 is dead but its lease not yet expired:
	// n3 never applies it, the node that takes its tablets over must.
	if err := sc.nodes["n1"].admin.DropRowRange(ctx, "t", "z-a"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	for r := range acked {
		if strings.HasPrefix(r, "z-a") {
			delete(acked, r)
		}
	}
	mu.Unlock()
	testkit.Eventually(t, "n3's tablet to be taken over", 30*time.Second, func() (bool, string) {
		got := owners(t, sc.nodes["n1"])
		return !strings.Contains(got, "n3"), got
	})
	if got := owners(t, sc.nodes["n1"]); got != "[,g)n1 [g,p)n2 [p,t)n2 [t,)n1" {
		t.Errorf("tablets after the take-over: %s (n1 was ruled out)", got)
	}
	mu.Lock()
	before = len(acked)
	mu.Unlock()
	waitWrites(before + 50)
	close(stop)
	<-done
	t.Logf("tablets after the take-over: %s; slowest acknowledged write across it: %v", owners(t, sc.nodes["n2"]), slowest)
	for _, id := range []string{"n1", "n2"} {
		keys, vals := readScale(t, sc.nodes[id])
		if !sort.StringsAreSorted(keys) {
			t.Errorf("read through %s is out of order", id)
		}
		mu.Lock()
		missing := 0
		for r, v := range acked {
			if vals[r] != v {
				if missing < 5 {
					t.Errorf("read through %s: %s = %q, want %q", id, r, vals[r], v)
				}
				missing++
			}
		}
		if missing > 0 {
			t.Errorf("read through %s: %d of %d acknowledged writes missing or wrong", id, missing, len(acked))
		}
		for r := range vals {
			if strings.HasPrefix(r, "z-a") || (strings.HasPrefix(r, "y-c") && r != "y-c999") {
				t.Errorf("read through %s: row %s, dropped (or deleted, z-a025), is back", id, r)
				break
			}
		}
		if len(keys) != len(vals) {
			t.Errorf("read through %s: %d rows, %d distinct", id, len(keys), len(vals))
		}
		mu.Unlock()
	}
	// n3 comes back with its disk: it serves nothing it lost, reads
	// through it see every acknowledged write, and its tablets stay taken.
	n3 = sc.start(t, "n3", n3.dir)
	t.Cleanup(n3.stop)
	keys, vals := readScale(t, n3)
	mu.Lock()
	for r, v := range acked {
		if vals[r] != v {
			t.Errorf("read through n3 after its restart: %s = %q, want %q", r, vals[r], v)
			break
		}
	}
	if len(keys) < len(acked) || len(keys) != len(vals) {
		t.Errorf("read through n3 after its restart: %d rows (%d distinct), %d acknowledged", len(keys), len(vals), len(acked))
	}
	mu.Unlock()
	if got := owners(t, n3); strings.Contains(got, "n3") {
		t.Errorf("n3 owns tablets again after its restart: %s", got)
	}
}

func deleteRow() *bigtable.Mutation {
	m := bigtable.NewMutation()
	m.DeleteRow()
	return m
}

// TestFailoverUnderCheckpoints kills a node while its full checkpoint
// rounds (every 100 ms), log truncation, flushes and compactions run
// under concurrent writers: what its last catalog and the rest of its log
// hold must still be every acknowledged write.
func TestFailoverUnderCheckpoints(t *testing.T) {
	t.Parallel()
	sc := startScaleClusterTuned(t, 0, func(o *Options) {
		o.Cluster.Failover = true
		o.Cluster.LeaseTTL = time.Second
		o.Cluster.CheckpointInterval = 100 * time.Millisecond
	}, "n1", "n2", "n3")
	sc.createTable(t, "n1", "g", "p")
	ctx := context.Background()
	n3 := sc.nodes["n3"]
	var mu sync.Mutex
	acked := map[string]string{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w, via := range []string{"n1", "n2", "n1", "n2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tbl := sc.nodes[via].client.Open("t")
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				row, val := fmt.Sprintf("%c-%d-%05d", 'a'+(i*7+w)%26, w, i), fmt.Sprintf("v%d", i)
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				m := bigtable.NewMutation()
				m.Set("f", "c", bigtable.Timestamp(1000), []byte(val))
				err := tbl.Apply(wctx, row, m)
				cancel()
				if err == nil {
					mu.Lock()
					acked[row] = val
					mu.Unlock()
				}
			}
		}()
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	eng3 := n3.srv.Engine()
	for round := 0; round < 3; round++ {
		testkit.Eventually(t, "writes", 30*time.Second, func() (bool, string) { return count() >= 100*(round+1), fmt.Sprint(count()) })
		if err := eng3.Flush(); err != nil {
			t.Fatal(err)
		}
		if round == 1 {
			if err := eng3.Compact(ctx, []byte{0}, []byte{0xff, 0xff}); err != nil {
				t.Fatal(err)
			}
		}
	}
	f3 := n3.srv.cluster.fail
	if n := f3.rounds.Load(); n < 2 {
		t.Errorf("only %d checkpoint rounds on n3", n)
	}
	n3.crash()
	testkit.Eventually(t, "n3's tablet to be taken over", 30*time.Second, func() (bool, string) {
		got := owners(t, sc.nodes["n1"])
		return !strings.Contains(got, "n3"), got
	})
	before := count()
	testkit.Eventually(t, "writes after the take-over", 30*time.Second, func() (bool, string) { return count() >= before+100, fmt.Sprint(count()) })
	close(stop)
	wg.Wait()
	for _, id := range []string{"n1", "n2"} {
		_, vals := readScale(t, sc.nodes[id])
		mu.Lock()
		missing := 0
		for r, v := range acked {
			if vals[r] != v {
				missing++
			}
		}
		if missing > 0 {
			t.Errorf("read through %s: %d of %d acknowledged writes missing", id, missing, len(acked))
		}
		mu.Unlock()
	}
	t.Logf("%d writes acknowledged; n3 wrote %d checkpoint rounds", count(), f3.rounds.Load())
}
