//go:build unix

package robustness

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// boundsBig runs TestResourceBounds at the sizes: eight concurrent
// 200 MiB requests, a row of a million versions, 1,000 change-stream tails.
// Run it alone: flock /tmp/ebb-bench.lock go test ./robustness -run
// TestResourceBounds -v -bounds.big
var boundsBig = flag.Bool("bounds.big", false, "TestResourceBounds at full size (minutes, GiBs of memory)")

// boundsScale is one size of TestResourceBounds, with the bounds it
// asserts.
type boundsScale struct {
	requestBytes int    // each of eight concurrent requests
	inflight     string // --max-inflight-bytes
	memoryLimit  string // --memory-limit
	versions     int
	tails        int
	maxRSS       int64         // the server's peak RSS must stay below
	maxCanaryP99 time.Duration // a canary's reads during each load
	maxLimitRead float64       // the CellsPerColumnLimit(1) read ÷ a one-version row's
	maxTailsRSS  int64         // RSS the open tails may add
}

var (
	boundsSmall = boundsScale{requestBytes: 8 << 20, inflight: "20MiB", memoryLimit: "0", versions: 20000, tails: 100,
		maxRSS: 600 << 20, maxCanaryP99: time.Second, maxLimitRead: 5, maxTailsRSS: 64 << 20}
	boundsFull = boundsScale{requestBytes: 200 << 20, inflight: "512MiB", memoryLimit: "2GiB", versions: 1000000, tails: 1000,
		maxRSS: 3 << 30, maxCanaryP99: time.Second, maxLimitRead: 5, maxTailsRSS: 128 << 20}
)

// TestResourceBounds loads a server subprocess the way the issue says, with
// the official client, and checks its memory and a canary client's latency:
// eight concurrent requests of requestBytes (more than --max-inflight-bytes
// together: the excess is refused with RESOURCE_EXHAUSTED), a row of many
// versions read with CellsPerColumnLimit(1), and many open change-stream
// tails. The figures it logs are in docs/security.md.
func TestResourceBounds(t *testing.T) {
	sc := boundsSmall
	if *boundsBig {
		sc = boundsFull
	} else {
		t.Parallel()
	}
	httpAddr := testkit.FreeAddr(t)
	srv := startServe(t, "serve", "--addr", "127.0.0.1:0", "--http-addr", httpAddr, "--data", filepath.Join(t.TempDir(), "data"),
		"--max-inflight-bytes", sc.inflight, "--memory-limit", sc.memoryLimit)
	pid := srv.cmd.Process.Pid
	ctx := context.Background()
	conn, err := grpc.NewClient("passthrough:///"+srv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(300<<20), grpc.MaxCallRecvMsgSize(300<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client, err := bigtable.NewClientWithConfig(ctx, "p", "i", bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	admin, err := bigtable.NewAdminClient(ctx, "p", "i", option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", ColumnFamilies: map[string]bigtable.Family{"f": {}}}); err != nil {
		t.Fatal(err)
	}
	// The tails follow a table of their own, so they stay open through
	// the other loads without carrying them.
	if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "cs", ColumnFamilies: map[string]bigtable.Family{"f": {}},
		ChangeStreamRetention: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	tbl := client.Open("t")
	m := bigtable.NewMutation()
	m.Set("f", "c", 1000, []byte("canary"))
	if err := tbl.Apply(ctx, "canary", m); err != nil {
		t.Fatal(err)
	}

	t.Logf("server RSS at start: %d MiB", procStatus(t, pid, "VmRSS")>>20)
	can := startCanary(t, srv.addr)
	defer can.stop()
	can.phase("idle")
	waitPhase(can, 300)

	// 1. Many open change-stream tails, kept open through the rest.
	can.phase("tails opening")
	before := procStatus(t, pid, "VmRSS")
	tctx, cancelTails := context.WithCancel(ctx)
	var tails sync.WaitGroup
	var conns []*grpc.ClientConn
	for i := range sc.tails {
		if i%90 == 0 { // under --max-streams-per-conn (100)
			c, err := grpc.NewClient("passthrough:///"+srv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		raw := btpb.NewBigtableClient(conns[len(conns)-1])
		tails.Add(1)
		go func() {
			defer tails.Done()
			st, err := raw.ReadChangeStream(tctx, &btpb.ReadChangeStreamRequest{TableName: "projects/p/instances/i/tables/cs"})
			if err != nil {
				return
			}
			for {
				if _, err := st.Recv(); err != nil {
					return
				}
			}
		}()
	}
	defer func() {
		cancelTails()
		tails.Wait()
		for _, c := range conns {
			c.Close()
		}
	}()
	testkit.Eventually(t, "every tail open", 2*time.Minute, func() (bool, string) {
		n := openTails(t, httpAddr)
		return n >= float64(sc.tails), fmt.Sprintf("%v of %d tails open", n, sc.tails)
	})
	can.phase("tails open")
	waitPhase(can, 300)
	after := procStatus(t, pid, "VmRSS")
	t.Logf("%d open change-stream tails: server RSS %d → %d MiB (%+d MiB)", sc.tails, before>>20, after>>20, (after-before)>>20)
	if after-before > sc.maxTailsRSS {
		t.Errorf("the tails added %d MiB, more than %d", (after-before)>>20, sc.maxTailsRSS>>20)
	}

	// 2. Eight concurrent big requests.
	can.phase("big requests")
	value := bytes.Repeat([]byte("x"), sc.requestBytes/2)
	var wg sync.WaitGroup
	codesSeen := make([]codes.Code, 8)
	for i := range codesSeen {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := bigtable.NewMutation()
			m.Set("f", "a", 1000, value)
			m.Set("f", "b", 1000, value)
			codesSeen[i] = status.Code(tbl.Apply(ctx, fmt.Sprint("big", i), m))
		}()
	}
	wg.Wait()
	ok, exhausted := 0, 0
	for i, c := range codesSeen {
		switch c {
		case codes.OK:
			ok++
		case codes.ResourceExhausted:
			exhausted++
		default:
			t.Errorf("big request %d: %v", i, c)
		}
	}
	t.Logf("8 concurrent %d MiB requests, --max-inflight-bytes %s: %d served, %d refused (RESOURCE_EXHAUSTED); server peak RSS %d MiB",
		sc.requestBytes>>20, sc.inflight, ok, exhausted, procStatus(t, pid, "VmHWM")>>20)
	if ok == 0 || exhausted == 0 {
		t.Errorf("want some requests served and some refused: %d served, %d refused", ok, exhausted)
	}

	// 3. A row of many versions, read with CellsPerColumnLimit(1).
	can.phase("write versions")
	start := time.Now()
	for done := 0; done < sc.versions; {
		m := bigtable.NewMutation()
		for k := 0; done < sc.versions && k < 50000; k, done = k+1, done+1 {
			m.Set("f", "c", bigtable.Timestamp(done+1)*1000, []byte("v"))
		}
		if err := tbl.Apply(ctx, "many", m); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote %d versions of one column in %v", sc.versions, time.Since(start).Round(time.Millisecond))
	can.phase("column limit reads")
	// Each limited read is paired with the same read of a one-version
	// row, so the ratio holds on a loaded machine.
	var reads, plain []time.Duration
	for range 50 {
		start := time.Now()
		row, err := tbl.ReadRow(ctx, "many", bigtable.RowFilter(bigtable.LatestNFilter(1)))
		reads = append(reads, time.Since(start))
		if err != nil || len(row["f"]) != 1 || row["f"][0].Timestamp != bigtable.Timestamp(sc.versions)*1000 {
			t.Fatalf("CellsPerColumnLimit(1) read: %v, %v", row, err)
		}
		start = time.Now()
		if _, err := tbl.ReadRow(ctx, "canary", bigtable.RowFilter(bigtable.LatestNFilter(1))); err != nil {
			t.Fatal(err)
		}
		plain = append(plain, time.Since(start))
	}
	slices.Sort(reads)
	slices.Sort(plain)
	ratio := float64(reads[len(reads)/2]) / float64(plain[len(plain)/2])
	start = time.Now()
	n := 0
	if err := tbl.ReadRows(ctx, bigtable.SingleRow("many"), func(r bigtable.Row) bool { n = len(r["f"]); return true }); err != nil {
		t.Fatalf("whole row: %v", err)
	}
	whole := time.Since(start)
	t.Logf("%d-version row with CellsPerColumnLimit(1): median %v (%.2f× a one-version row's %v), max %v; the whole row (%d cells): %v",
		sc.versions, reads[len(reads)/2].Round(time.Microsecond), ratio, plain[len(plain)/2].Round(time.Microsecond),
		reads[len(reads)-1].Round(time.Microsecond), n, whole.Round(time.Millisecond))
	if ratio > sc.maxLimitRead {
		t.Errorf("CellsPerColumnLimit(1) read: %.2f× a one-version row's, more than %v×", ratio, sc.maxLimitRead)
	}

	peak := procStatus(t, pid, "VmHWM")
	t.Logf("server peak RSS over the whole test: %d MiB (bound %d MiB)", peak>>20, sc.maxRSS>>20)
	if peak > sc.maxRSS {
		t.Errorf("server peak RSS %d MiB > %d MiB", peak>>20, sc.maxRSS>>20)
	}
	for _, ph := range can.report() {
		t.Logf("canary reads during %-19s n=%-5d failed=%-3d p50 %-10v p99 %v", ph.name+":", ph.n, ph.failed, ph.p50, ph.p99)
		if ph.p99 > sc.maxCanaryP99 {
			t.Errorf("canary p99 during %s: %v > %v", ph.name, ph.p99, sc.maxCanaryP99)
		}
	}
}

// procStatus reads a kB field of /proc/PID/status, in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// canary reads one small row in a loop on its own connection and keeps its
// latencies per phase.
type canary struct {
	cur    atomic.Pointer[string]
	mu     sync.Mutex
	lat    map[string][]time.Duration
	failed map[string]int
	order  []string
	count  atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
}

func startCanary(t *testing.T, addr string) *canary {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &canary{lat: map[string][]time.Duration{}, failed: map[string]int{}, cancel: cancel, done: make(chan struct{})}
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	client, err := bigtable.NewClientWithConfig(ctx, "p", "i", bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	tbl := client.Open("t")
	go func() {
		defer close(c.done)
		defer conn.Close()
		defer client.Close()
		for ctx.Err() == nil {
			start := time.Now()
			_, err := tbl.ReadRow(ctx, "canary")
			d := time.Since(start)
			if p := c.cur.Load(); p != nil && ctx.Err() == nil {
				c.mu.Lock()
				if err != nil {
					c.failed[*p]++
				} else {
					c.lat[*p] = append(c.lat[*p], d)
				}
				c.mu.Unlock()
			}
			c.count.Add(1)
			time.Sleep(2 * time.Millisecond) // a steady trickle, not a flood
		}
	}()
	return c
}

func (c *canary) phase(name string) {
	c.mu.Lock()
	c.order = append(c.order, name)
	c.mu.Unlock()
	c.cur.Store(&name)
}

// waitPhase lets the canary make n more reads.
func waitPhase(c *canary, n int64) {
	target := c.count.Load() + n
	testkit.Poll(time.Hour, func() bool { return c.count.Load() >= target })
}

func (c *canary) stop() { c.cancel(); <-c.done }

type phaseStats struct {
	name      string
	n, failed int
	p50, p99  time.Duration
}

func (c *canary) report() []phaseStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []phaseStats
	for _, name := range c.order {
		l := slices.Clone(c.lat[name])
		if len(l) == 0 {
			continue
		}
		slices.Sort(l)
		out = append(out, phaseStats{name, len(l), c.failed[name], l[len(l)/2].Round(time.Microsecond), l[len(l)*99/100].Round(time.Microsecond)})
	}
	return out
}

func openTails(t *testing.T, httpAddr string) float64 {
	v, _ := testkit.Metric(t, httpAddr, "ebbtable_open_change_streams")
	return v
}
