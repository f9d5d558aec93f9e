package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/etcdtest"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server/clusterpb"
)

// watchLines runs `ebbtable watch` from the oldest record until now and
// decodes its lines.
func watchLines(t *testing.T, addr, table string, extra ...string) []map[string]any {
	t.Helper()
	args := append([]string{"watch", table, "--addr", addr, "--project", testProject, "--instance", testInstance,
		"--since", "oldest", "--until", time.Now().UTC().Format(time.RFC3339Nano)}, extra...)
	r := ebbtable(t, args...).mustSucceed(t, "watch")
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("watch printed %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestWatchAndChangeStreamCommands(t *testing.T) {
	t.Parallel()
	srv := startServe(t, "serve", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", t.TempDir(), "--gc-interval", "100ms")
	client, admin := officialClients(t, srv.addr)
	ctx := context.Background()
	if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "audit", ColumnFamilies: map[string]bigtable.Family{
		"cf": {GCPolicy: bigtable.MaxVersionsPolicy(1)}}}); err != nil {
		t.Fatal(err)
	}
	conn := []string{"--addr", srv.addr, "--project", testProject, "--instance", testInstance}
	if r := ebbtable(t, append([]string{"watch", "audit"}, conn...)...); r.code != 1 || !strings.Contains(r.stderr, "no change stream") {
		t.Errorf("watch without a stream: exit %d, stderr %s", r.code, r.stderr)
	}
	if r := ebbtable(t, append([]string{"changestream", "enable", "audit", "--retention", "1h"}, conn...)...); r.code != 2 {
		t.Errorf("one-hour retention: exit %d", r.code)
	}
	ebbtable(t, append([]string{"changestream", "enable", "audit", "--retention", "48h"}, conn...)...).mustSucceed(t, "enable")
	if info, err := admin.TableInfo(ctx, "audit"); err != nil || info.ChangeStreamRetention != 48*time.Hour {
		t.Fatalf("after enable: %+v %v", info, err)
	}
	tbl := client.Open("audit")
	for i, v := range []string{"v1", "v2"} {
		m := bigtable.NewMutation()
		m.Set("cf", "q", bigtable.Timestamp(int64(baseTS)+int64(i)*1000), []byte(v))
		if err := tbl.Apply(ctx, "row\xff", m); err != nil {
			t.Fatal(err)
		}
	}
	// Wait for the collector to remove the older version.
	var all []map[string]any
	deadline := time.Now().Add(processTimeout)
	for len(all) < 3 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		all = watchLines(t, srv.addr, "audit")
	}
	if len(all) != 3 {
		t.Fatalf("watch printed %d records, want 2 writes and 1 collection: %v", len(all), all)
	}
	for _, r := range all[:2] {
		if r["type"] != "USER" || r["reason"] != "user" || r["transaction_tag"] != "" || r["is_system_transaction"] != false || r["row_key_base64"] != true {
			t.Errorf("user record %v", r)
		}
	}
	gc := all[2]
	if gc["type"] != "GARBAGE_COLLECTION" || gc["reason"] != "gc-versions" || gc["transaction_tag"] != "GarbageCollection" || gc["is_system_transaction"] != true {
		t.Errorf("gc record %v", gc)
	}
	if user := watchLines(t, srv.addr, "audit", "--exclude-system"); len(user) != 2 {
		t.Errorf("--exclude-system printed %d records, want 2", len(user))
	}
	// Resume after the first record.
	r := ebbtable(t, append([]string{"watch", "audit", "--token", all[0]["token"].(string), "--until", time.Now().UTC().Format(time.RFC3339Nano)}, conn...)...).mustSucceed(t, "watch --token")
	if n := strings.Count(r.stdout, "\n"); n != 2 {
		t.Errorf("resumed watch printed %d lines, want 2:\n%s", n, r.stdout)
	}
	ebbtable(t, append([]string{"changestream", "disable", "audit"}, conn...)...).mustSucceed(t, "disable")
	if info, _ := admin.TableInfo(ctx, "audit"); info.ChangeStreamRetention != nil {
		t.Errorf("retention after disable: %v", info.ChangeStreamRetention)
	}
}

// TestWatchCluster runs `ebbtable watch` against one node of a three-node
// cluster (etcd in the test, a shared SSTable directory, three `ebbtable
// serve --etcd` processes) while the official client writes through all
// three nodes and the table's tablets split, move and merge: the watch
// that follows the stream, a one-shot watch of the same span afterwards
// through another node, and a watch resumed from a token in the middle
// each print every acknowledged write exactly once, each row's writes in
// order, in commit order overall.
func TestWatchCluster(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	shared := t.TempDir()
	var nodes []*serverProc
	for _, id := range []string{"n1", "n2", "n3"} {
		nodes = append(nodes, startServe(t, "serve", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", filepath.Join(t.TempDir(), id),
			"--etcd", etcd, "--node-id", id, "--shared-storage", "file://"+shared, "--lease-ttl", "2s"))
	}
	ctx := context.Background()
	var clients []*bigtable.Client
	for _, n := range nodes {
		c, _ := officialClients(t, n.addr)
		clients = append(clients, c)
	}
	_, admin := officialClients(t, nodes[0].addr)
	if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "events", ColumnFamilies: map[string]bigtable.Family{
		"cf": {GCPolicy: bigtable.MaxVersionsPolicy(100)}}}); err != nil {
		t.Fatal(err)
	}
	if err := admin.UpdateTableWithChangeStream(ctx, "events", 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	conn := func(n *serverProc) []string {
		return []string{"--addr", n.addr, "--project", testProject, "--instance", testInstance}
	}
	// Every node knows the stream before the watch starts.
	start := time.Now().UTC().Add(time.Millisecond)
	for _, n := range nodes {
		testkit.Eventually(t, "the change stream on every node", processTimeout, func() (bool, string) {
			r := ebbtable(t, append([]string{"watch", "events", "--since", start.Format(time.RFC3339Nano), "--until", start.Format(time.RFC3339Nano)}, conn(n)...)...)
			return r.code == 0, r.stderr
		})
	}

	// The watch that follows the stream, through n2.
	var live syncBuffer
	var liveErr strings.Builder
	watch := exec.Command(ebbtableBin, append([]string{"watch", "events", "--since", start.Format(time.RFC3339Nano)}, conn(nodes[1])...)...)
	watch.Env = cleanEnv()
	watch.Stdout, watch.Stderr = &live, &liveErr
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	watchDone := make(chan error, 1)
	go func() { watchDone <- watch.Wait() }()
	t.Cleanup(func() {
		watch.Process.Kill()
		<-watchDone
	})

	// Writers: one per node, each writing its own rows in order, spread
	// over the key space so every tablet gets some.
	const perWriter = 120
	var (
		mu    sync.Mutex
		acked = map[string][]string{} // row -> values acknowledged, in order
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tbl := c.Open("events")
			for i := 0; i < perWriter; i++ {
				select {
				case <-stop:
					return
				default:
				}
				row := fmt.Sprintf("%c-w%d-%d", 'a'+rune(i%26), w, i%7)
				val := fmt.Sprintf("w%d-%03d", w, i)
				m := bigtable.NewMutation()
				m.Set("cf", "q", bigtable.Timestamp(int64(baseTS)+int64(i)*1000), []byte(val))
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				err := tbl.Apply(wctx, row, m)
				cancel()
				if err != nil {
					continue // not acknowledged: it may or may not show, never twice
				}
				mu.Lock()
				acked[row] = append(acked[row], val)
				mu.Unlock()
			}
		}()
	}
	// Meanwhile: splits, moves and a merge, through n1's cluster service.
	cc := testkit.Dial(t, nodes[0].addr)
	cl := clusterpb.NewClusterClient(cc)
	tableName := "projects/" + testProject + "/instances/" + testInstance + "/tables/events"
	tabletAt := func(key string) *clusterpb.Tablet {
		t.Helper()
		r, err := cl.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: tableName})
		if err != nil {
			t.Fatal(err)
		}
		for _, tb := range r.Tablets {
			if key >= string(tb.Start) && (len(tb.End) == 0 || key < string(tb.End)) {
				return tb
			}
		}
		t.Fatalf("no tablet holds %q: %v", key, r.Tablets)
		return nil
	}
	waitWrites := func(n int) {
		testkit.Poll(processTimeout, func() bool {
			mu.Lock()
			defer mu.Unlock()
			total := 0
			for _, v := range acked {
				total += len(v)
			}
			return total >= n
		})
	}
	ops := 0
	step := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		ops++
		waitWrites(ops * 40)
	}
	// moveAway moves the tablet holding key to a node other than its owner.
	moveAway := func(key string) error {
		tb := tabletAt(key)
		to := "n1"
		for _, n := range []string{"n3", "n2", "n1"} {
			if n != tb.Owner {
				to = n
				break
			}
		}
		_, err := cl.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: tableName, Tablet: tb.Id, To: to})
		return err
	}
	waitWrites(20)
	_, err := cl.SplitTablet(ctx, &clusterpb.SplitTabletRequest{Table: tableName, Key: []byte("m")})
	step("split at m", err)
	step("move [m, )", moveAway("m"))
	_, err = cl.SplitTablet(ctx, &clusterpb.SplitTabletRequest{Table: tableName, Key: []byte("f")})
	step("split at f", err)
	_, err = cl.MergeTablet(ctx, &clusterpb.MergeTabletRequest{Table: tableName, Tablet: tabletAt("a").Id})
	step("merge [, f) and [f, m)", err)
	step("move [, m)", moveAway("a"))
	_, err = cl.SplitTablet(ctx, &clusterpb.SplitTabletRequest{Table: tableName, Key: []byte("s")})
	step("split at s", err)
	step("move [s, )", moveAway("s"))
	close(stop)
	wg.Wait()
	end := time.Now().UTC()

	mu.Lock()
	total := 0
	for _, v := range acked {
		total += len(v)
	}
	mu.Unlock()
	if total < perWriter {
		t.Fatalf("only %d writes were acknowledged", total)
	}

	// check says whether lines hold every acknowledged write exactly once,
	// each row's in order, all in commit order.
	check := func(lines []string) (bool, string) {
		seen := map[string][]string{}
		var last string
		var problems []string
		for _, line := range lines {
			var r struct {
				Commit     int64  `json:"commit_micros"`
				Tiebreaker int32  `json:"tiebreaker"`
				Index      uint32 `json:"index"`
				RowKey     string `json:"row_key"`
				Type       string `json:"type"`
				Mods       []struct {
					Value string `json:"value"`
				} `json:"mods"`
			}
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				return false, fmt.Sprintf("line %q: %v", line, err)
			}
			key := fmt.Sprintf("%020d.%010d.%010d", r.Commit, uint32(r.Tiebreaker), r.Index)
			if key <= last {
				problems = append(problems, fmt.Sprintf("out of commit order: %s after %s", key, last))
			}
			last = key
			if r.Type != "USER" || len(r.Mods) != 1 {
				problems = append(problems, "unexpected record "+line)
				continue
			}
			seen[r.RowKey] = append(seen[r.RowKey], r.Mods[0].Value)
		}
		mu.Lock()
		defer mu.Unlock()
		missing := 0
		for row, want := range acked {
			got, i := seen[row], 0
			for _, v := range got {
				if i < len(want) && v == want[i] {
					i++
				}
			}
			missing += len(want) - i
			dup := map[string]bool{}
			for _, v := range got {
				if dup[v] {
					problems = append(problems, fmt.Sprintf("row %s: %s twice", row, v))
				}
				dup[v] = true
			}
		}
		if missing > 0 {
			problems = append(problems, fmt.Sprintf("%d of %d acknowledged writes missing or out of row order", missing, total))
		}
		if len(problems) > 5 {
			problems = append(problems[:5], fmt.Sprintf("… %d more", len(problems)-5))
		}
		return len(problems) == 0, strings.Join(problems, "; ")
	}
	liveLines := func() []string {
		s := strings.TrimSpace(live.String())
		if s == "" {
			return nil
		}
		return strings.Split(s, "\n")
	}
	testkit.Eventually(t, "the following watch prints every acknowledged write", processTimeout, func() (bool, string) {
		return check(liveLines())
	})
	// A heartbeat later, nothing more came (no duplicate at the end).
	time.Sleep(2 * watchHeartbeat)
	if ok, why := check(liveLines()); !ok {
		t.Errorf("following watch: %s", why)
	}
	watch.Process.Signal(syscall.SIGINT)
	if err := <-watchDone; err != nil {
		t.Errorf("watch after SIGINT: %v; stderr:\n%s", err, liveErr.String())
	}
	watchDone <- nil // for the cleanup

	// The same span afterwards through n3, and resumed in the middle.
	r := ebbtable(t, append([]string{"watch", "events", "--since", start.Format(time.RFC3339Nano), "--until", end.Format(time.RFC3339Nano)}, conn(nodes[2])...)...).mustSucceed(t, "watch --until")
	once := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if ok, why := check(once); !ok {
		t.Errorf("one-shot watch through n3: %s", why)
	}
	mid := len(once) / 2
	var m struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal([]byte(once[mid]), &m); err != nil {
		t.Fatal(err)
	}
	r = ebbtable(t, append([]string{"watch", "events", "--token", m.Token, "--until", end.Format(time.RFC3339Nano)}, conn(nodes[0])...)...).mustSucceed(t, "watch --token")
	if got, want := strings.TrimSpace(r.stdout), strings.Join(once[mid+1:], "\n"); got != want {
		t.Errorf("watch resumed after line %d of %d printed %d lines, want the %d after it", mid+1, len(once), strings.Count(got, "\n")+1, len(once)-mid-1)
	}
	t.Logf("%d acknowledged writes, %d lines", total, len(once))
}
