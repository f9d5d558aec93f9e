//go:build unix

package robustness

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"google.golang.org/api/option"
)

// tableChecksum lists every cell of table t, sorted.
func tableChecksum(t *testing.T, client *bigtable.Client) (string, int) {
	t.Helper()
	var lines []string
	err := client.Open("t").ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		for _, items := range r {
			for _, it := range items {
				lines = append(lines, fmt.Sprintf("%s %s %d %s", it.Row, it.Column, it.Timestamp, it.Value))
			}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n"), len(lines)
}

// TestThreeClusters runs three processes as one instance on loopback:
// writes on every cluster, including to the same cells, while one cluster
// is killed with SIGKILL and restarted; after cbt waitforreplication the
// three full-table checksums are equal and every acknowledged write is
// there once. Then a paused link raises the max delay, which falls after
// it heals.
func TestThreeClusters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	a := startServe(t, "serve", "--cluster-id", "a", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", dirs[0])
	ca, aa := officialClients(t, a.addr)
	if err := aa.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", ColumnFamilies: map[string]bigtable.Family{"f": {GCPolicy: bigtable.NoGcPolicy()}}}); err != nil {
		t.Fatal(err)
	}
	writeWithin := func(d time.Duration, c *bigtable.Client, row, col string, ts int, val string) error {
		m := bigtable.NewMutation()
		m.Set("f", col, bigtable.Timestamp(ts*1000), []byte(val))
		wctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return c.Open("t").Apply(wctx, row, m)
	}
	// write may meet a killed server: 2 s, as the client retries a dead
	// server forever.
	write := func(c *bigtable.Client, row, col string, ts int, val string) error {
		return writeWithin(2*time.Second, c, row, col, ts, val)
	}
	// mustWrite writes to a live server and must succeed: a generous
	// budget, as a loaded machine (CI runs every package at once) can
	// hold one write past 2 s.
	mustWrite := func(c *bigtable.Client, row, col string, ts int, val string) error {
		return writeWithin(30*time.Second, c, row, col, ts, val)
	}
	for i := range 100 {
		if err := mustWrite(ca, fmt.Sprintf("seed-%03d", i), "c", 1, "s"); err != nil {
			t.Fatal(err)
		}
	}
	bHTTP := testkit.FreeAddr(t)
	b := startServe(t, "serve", "--cluster-id", "b", "--addr", "127.0.0.1:0", "--http-addr", bHTTP, "--data", dirs[1], "--join", a.addr)
	cArgs := []string{"serve", "--cluster-id", "c", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", dirs[2], "--join", a.addr}
	c := startServe(t, cArgs...)
	cb, _ := officialClients(t, b.addr)
	cc, _ := officialClients(t, c.addr)

	// Writers on every cluster; each write's row is unique to its writer,
	// and every writer also writes the shared cell "same".
	var (
		mu    sync.Mutex
		acked = map[string]bool{}
		wg    sync.WaitGroup
	)
	writer := func(name string, client func() *bigtable.Client, n int) {
		defer wg.Done()
		for i := range n {
			row := fmt.Sprintf("%s-%03d", name, i)
			if err := write(client(), row, "c", 2, name); err == nil {
				mu.Lock()
				acked[row] = true
				mu.Unlock()
			}
			write(client(), "same", "c", 3, fmt.Sprintf("%s-%d", name, i))
		}
	}
	var cmu sync.Mutex
	curC := cc
	getC := func() *bigtable.Client { cmu.Lock(); defer cmu.Unlock(); return curC }
	wg.Add(3)
	go writer("a", func() *bigtable.Client { return ca }, 150)
	go writer("b", func() *bigtable.Client { return cb }, 150)
	go writer("c", getC, 60)
	time.Sleep(150 * time.Millisecond)
	c.kill(t) // mid-stream
	c = startServe(t, cArgs...)
	newC, _ := officialClients(t, c.addr)
	cmu.Lock()
	curC = newC
	cmu.Unlock()
	wg.Wait()
	for i := range 20 { // writes on the restarted cluster
		row := fmt.Sprintf("c2-%03d", i)
		if err := mustWrite(newC, row, "c", 2, "c2"); err != nil {
			t.Fatal(err)
		}
		acked[row] = true
	}

	cbtPath, err := exec.LookPath("cbt")
	if err != nil {
		t.Fatalf("cbt is not on the PATH: %v", err)
	}
	env := []string{"BIGTABLE_EMULATOR_HOST=" + a.addr, "PATH=" + t.TempDir()}
	run(t, env, cbtPath, "-project", testProject, "-instance", testInstance, "waitforreplication", "t").MustSucceed(t, "cbt waitforreplication")
	sumA, n := tableChecksum(t, ca)
	// waitforreplication covers the writes every cluster acknowledged before it.
	for _, cl := range []*bigtable.Client{cb, newC} {
		if sum, _ := tableChecksum(t, cl); sum != sumA {
			t.Fatalf("checksums differ after waitforreplication:\n%s\n---\n%s", sumA, sum)
		}
	}
	for row := range acked {
		if !strings.Contains(sumA, "\n"+row+" f:c ") && !strings.HasPrefix(sumA, row+" f:c ") {
			t.Errorf("acknowledged write %s lost", row)
		}
	}
	if want := 100 + len(acked) + 1; n < want {
		t.Errorf("%d cells, want at least %d", n, want)
	}
	if strings.Count(sumA, "same f:c ") != 1 {
		t.Errorf("shared cell not settled to one value:\n%s", sumA)
	}

	// Pause b's link from a: b's max delay behind a grows; resume: it falls.
	ebb := func(args ...string) result {
		return run(t, nil, ebbtableBin, append(args, "--addr", b.addr)...).MustSucceed(t, "ebbtable "+args[0])
	}
	ebb("replication", "pause", "a")
	gauge := `ebbtable_replication_max_delay_seconds{source="a"}`
	before, _ := testkit.Metric(t, bHTTP, gauge)
	time.Sleep(1500 * time.Millisecond)
	during, ok := testkit.Metric(t, bHTTP, gauge)
	if !ok || during < before+1 {
		t.Fatalf("paused link: max delay %v then %v (found %v)", before, during, ok)
	}
	if out := ebb("replication", "status").Stdout; !strings.Contains(out, "true") || !strings.Contains(out, "a ") {
		t.Errorf("replication status:\n%s", out)
	}
	ebb("replication", "resume", "a")
	testkit.Eventually(t, "max delay falls after resuming", 20*time.Second, func() (bool, string) {
		after, _ := testkit.Metric(t, bHTTP, gauge)
		return after < 1, fmt.Sprint(after)
	})
	// App-profile routing through the official client: a single-cluster
	// profile naming b, used against a, writes on b. With a's pulls from b
	// paused, the write is on b and not (yet) on a.
	run(t, nil, ebbtableBin, "replication", "pause", "b", "--addr", a.addr).MustSucceed(t, "pause a's link from b")
	iac, err := bigtable.NewInstanceAdminClient(ctx, testProject, option.WithGRPCConn(testkit.Dial(t, a.addr)))
	if err != nil {
		t.Fatal(err)
	}
	defer iac.Close()
	if _, err := iac.CreateAppProfile(ctx, bigtable.ProfileConf{InstanceID: testInstance, ProfileID: "to-b",
		RoutingConfig: &bigtable.SingleClusterRoutingConfig{ClusterID: "b"}}); err != nil {
		t.Fatal(err)
	}
	routed, err := bigtable.NewClientWithConfig(ctx, testProject, testInstance, bigtable.ClientConfig{AppProfile: "to-b", MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(testkit.Dial(t, a.addr)))
	if err != nil {
		t.Fatal(err)
	}
	defer routed.Close()
	if err := mustWrite(routed, "routed", "c", 4, "via-a"); err != nil {
		t.Fatal(err)
	}
	if row, err := cb.Open("t").ReadRow(ctx, "routed"); err != nil || len(row["f"]) != 1 {
		t.Fatalf("routed write not on b: %v %v", row, err)
	}
	if row, _ := ca.Open("t").ReadRow(ctx, "routed"); len(row) != 0 {
		t.Fatalf("routed write served by a: %v", row)
	}
	for _, p := range []*serverProc{a, b, c} {
		if code := p.terminate(t); code != 0 {
			t.Errorf("exit code %d; stderr:\n%s", code, p.stderr.String())
		}
	}
}
