package console_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/chromedp/chromedp"
	"github.com/ebbtable/ebbtable/internal/etcdtest"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/internal/testkit/servertest"
	"github.com/ebbtable/ebbtable/server"
	"github.com/ebbtable/ebbtable/server/clusterpb"
)

// TestConsoleChangeTailCluster loads the change tail of a table whose
// tablets are served by three nodes of a scale-out cluster, in headless
// chromium on one node's console: it shows every record of the table, each
// once, in commit order, whichever node served and received the write,
// and goes on showing new ones live.
func TestConsoleChangeTailCluster(t *testing.T) {
	t.Parallel() // its own server and browser tab
	exe := chromiumPath(t)
	etcd, shared := etcdtest.Start(t), t.TempDir()
	ids := []string{"n1", "n2", "n3"}
	nodes := map[string]*servertest.Env{}
	for _, id := range ids {
		nodes[id] = servertest.Start(t, servertest.RealClock(), servertest.WithOptions(func(o *server.Options) {
			o.HTTPAddr, o.ClusterID = "127.0.0.1:0", "c1"
			o.Cluster = &server.ClusterOptions{Etcd: []string{etcd}, NodeID: id, LeaseTTL: 2 * time.Second,
				SharedStorage: "file://" + shared, SplitInterval: 50 * time.Millisecond}
		}))
	}
	testkit.Eventually(t, "every node to see the others", 10*time.Second, func() (bool, string) {
		got := len(nodes["n1"].Srv.ClusterMember().Nodes())
		return got == len(ids), fmt.Sprintf("%d nodes", got)
	})
	ctx := context.Background()
	// Tablets [,g) [g,p) [p,): one on each node.
	if err := nodes["n1"].Admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "events", SplitKeys: []string{"g", "p"},
		ChangeStreamRetention: 24 * time.Hour, ColumnFamilies: map[string]bigtable.Family{"cf": {}}}); err != nil {
		t.Fatal(err)
	}
	// want: the rows whose writes were acknowledged; maybe: the rows
	// whose writes failed (during a move), which may show at most once.
	var mu sync.Mutex
	want, maybe := map[string]bool{}, map[string]bool{}
	write := func(round int) error {
		for _, id := range ids {
			tbl := nodes[id].Client.Open("events")
			for _, first := range []string{"b", "k", "t"} { // a row of each tablet
				row := fmt.Sprintf("%s-%s-%d", first, id, round)
				m := bigtable.NewMutation()
				m.Set("cf", "c", bigtable.Now(), []byte("v"))
				err := tbl.Apply(ctx, row, m)
				mu.Lock()
				if err != nil {
					maybe[row] = true
				} else {
					want[row] = true
				}
				mu.Unlock()
				if err != nil {
					return fmt.Errorf("write %s through %s: %v", row, id, err)
				}
			}
		}
		return nil
	}
	if err := write(0); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t, exe)
	tp := "http://" + nodes["n2"].Srv.HTTPAddr() + "/t/" + servertest.Project + "/" + servertest.Instance + "/events/changes"
	b.do(t, chromedp.Navigate(tp), chromedp.WaitVisible(chromedp.CSS("#tail")))
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](`document.getElementById("tail").dataset.polled === "1"`, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("the tail never answered: %v; status %q", err, b.text(t, "#tail-status"))
	}
	b.checkErrors(t, tp)
	// seen waits for the tail to hold every row written, then checks
	// each shows once and the records run newest first.
	seen := func() {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		js := fmt.Sprintf(`document.querySelectorAll("#tail tbody tr").length >= %d`, len(want))
		if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(15*time.Second))); err != nil {
			t.Logf("the tail did not fill: %v", err)
		}
		rows := eval[[]string](t, b, `[...document.querySelectorAll("#tail tbody tr")].map(tr => tr.children[1].textContent)`)
		when := eval[[]string](t, b, `[...document.querySelectorAll("#tail tbody tr")].map(tr => tr.children[0].textContent)`)
		got := map[string]int{}
		for _, r := range rows {
			got[r]++
		}
		var missing, twice []string
		for r := range want {
			if got[r] == 0 {
				missing = append(missing, r)
			}
		}
		for r, n := range got {
			if n > 1 || (!want[r] && !maybe[r]) {
				twice = append(twice, fmt.Sprintf("%s×%d", r, n))
			}
		}
		sort.Strings(missing)
		sort.Strings(twice)
		if len(missing) > 0 || len(twice) > 0 {
			t.Fatalf("the tail on n2 shows %d records; missing %d of %d: %v; unexpected or repeated: %v", len(rows), len(missing), len(want), missing, twice)
		}
		if !sort.SliceIsSorted(when, func(i, j int) bool { return when[i] > when[j] }) {
			t.Errorf("the tail is not newest first:\n%s", strings.Join(when, "\n"))
		}
	}
	seen()
	// New writes through every node show up live.
	if err := write(1); err != nil {
		t.Fatal(err)
	}
	seen()
	// Writes go on while [k,p) splits at m and its halves move: the tail
	// follows the tablets and misses nothing.
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		var errs []string
		for round := 2; ; round++ {
			select {
			case <-stop:
				done <- nil
				if len(errs) > 0 {
					t.Logf("writes that failed during the moves: %v", errs)
				}
				return
			default:
			}
			if err := write(round); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}()
	ops := clusterpb.NewClusterClient(testkit.Dial(t, nodes["n1"].Addr()))
	tableName := "projects/" + servertest.Project + "/instances/" + servertest.Instance + "/tables/events"
	tabs, err := ops.SplitTablet(ctx, &clusterpb.SplitTabletRequest{Table: tableName, Key: []byte("m")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tabs.Tablets {
		if string(tb.Start) == "g" || string(tb.Start) == "m" {
			to := map[string]string{"g": "n3", "m": "n1"}[string(tb.Start)]
			if _, err := ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: tableName, Tablet: tb.Id, To: to}); err != nil {
				t.Fatalf("move [%s,%s) to %s: %v", tb.Start, tb.End, to, err)
			}
		}
	}
	close(stop)
	<-done
	seen()
	b.checkErrors(t, tp)
	if text := b.text(t, "#tail-status"); !strings.HasPrefix(text, "live") {
		t.Errorf("tail status: %q", text)
	}
}
