package cli

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestSeedDivergenceStory plays the seed's example on three processes
// whose clocks the test moves (serve --debug-clock): row ip#685, family
// profile, column click-through, a cell of 2023-01-02 under a 30-day rule.
// Cluster a collects it at 31 days; the rule goes to 50 days; cluster b,
// collecting after the change, keeps it for 20 more days. The divergence
// gauge reads 20 days and `replication diff` lists the cell as expected.
// Age GC ships nothing; a raise of more than 90 days is refused, 90 is
// accepted; a coordinated raise leaves no divergence.
func TestSeedDivergenceStory(t *testing.T) {
	t.Parallel() // its clocks are the servers' --debug-clock, not the machine's
	ctx := context.Background()
	start := "2023-01-02T00:00:00Z"
	aHTTP := freeAddr(t)
	serve := func(id, httpAddr string, join string) *serverProc {
		args := []string{"serve", "--cluster-id", id, "--addr", "127.0.0.1:0", "--http-addr", httpAddr, "--data", t.TempDir(),
			"--debug-clock", start, "--gc-interval", "1000h"}
		if join != "" {
			args = append(args, "--join", join)
		}
		return startServe(t, args...)
	}
	a := serve("a", aHTTP, "")
	ca, aa := clientsAt(t, a.addr)
	month := 24 * time.Hour
	if err := aa.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", ColumnFamilies: map[string]bigtable.Family{
		"profile": {GCPolicy: bigtable.MaxAgePolicy(30 * month)},
		"other":   {GCPolicy: bigtable.MaxAgePolicy(30 * month)},
	}}); err != nil {
		t.Fatal(err)
	}
	b := serve("b", "off", a.addr)
	c := serve("c", "off", a.addr)
	cb, ab := clientsAt(t, b.addr)
	day := func(s string) bigtable.Timestamp {
		tm, err := time.Parse(time.DateOnly, s)
		if err != nil {
			t.Fatal(err)
		}
		return bigtable.Time(tm)
	}
	put := func(row, col string, ts bigtable.Timestamp) {
		m := bigtable.NewMutation()
		fam, q, _ := strings.Cut(col, ":")
		m.Set(fam, q, ts, []byte("v"))
		if err := ca.Open("t").Apply(ctx, row, m); err != nil {
			t.Fatal(err)
		}
	}
	put("ip#685", "profile:click-through", day("2023-01-02"))
	put("ip#700", "other:c", day("2022-12-20"))
	put("ip#701", "other:c", day("2023-01-02"))
	if err := aa.WaitForReplication(ctx, "t"); err != nil {
		t.Fatal(err)
	}

	ebb := func(p *serverProc, args ...string) result {
		t.Helper()
		return run(t, nil, ebbtableBin, append(args, "--addr", p.addr, "--project", testProject, "--instance", testInstance)...)
	}
	// Day 31 on every cluster.
	for _, p := range []*serverProc{a, b, c} {
		ebb(p, "debug", "clock", "set", "2023-02-02T00:00:00Z").mustSucceed(t, "debug clock set")
	}
	// a collects the cell under the 30-day rule.
	ebb(a, "gc", "run", "--table", "t", "--wait").mustSucceed(t, "gc run on a")
	if row, _ := ca.Open("t").ReadRow(ctx, "ip#685"); len(row) != 0 {
		t.Fatalf("a still has %v", row)
	}
	if out := ebb(a, "gc", "status").mustSucceed(t, "gc status").stdout; !regexpLine(out, `profile\s.*2023-01-03T00:00:00`) {
		t.Fatalf("gc status on a does not show the age cutoff 2023-01-03:\n%s", out)
	}
	// The rule goes to 50 days and reaches b.
	if err := aa.SetGCPolicy(ctx, "t", "profile", bigtable.MaxAgePolicy(50*month)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b has the 50-day rule", func() (bool, string) {
		info, err := ab.TableInfo(ctx, "t")
		if err != nil {
			return false, err.Error()
		}
		for _, f := range info.FamilyInfos {
			if f.Name == "profile" {
				return strings.Contains(f.GCPolicy, "50d") || strings.Contains(f.GCPolicy, "1200h"), f.GCPolicy
			}
		}
		return false, "no profile family"
	})
	// b collects after the change: it keeps the cell.
	ebb(b, "gc", "run", "--table", "t", "--wait").mustSucceed(t, "gc run on b")
	if row, err := cb.Open("t").ReadRow(ctx, "ip#685"); err != nil || len(row["profile"]) != 1 {
		t.Fatalf("b lost the cell: %v %v", row, err)
	}
	gauge := `ebbtable_replication_gc_divergence_seconds{family="profile",table="t"}`
	waitFor(t, "the divergence gauge reads 20 days", func() (bool, string) {
		v, ok := metric(t, aHTTP, gauge)
		// 20 days, give or take the milliseconds between the two passes.
		return ok && math.Abs(v-(20*24*time.Hour).Seconds()) < 60, fmt.Sprint(v, ok)
	})
	out := ebb(a, "replication", "diff", "t").mustSucceed(t, "replication diff").stdout
	if !regexpLine(out, `ip#685\s+profile:click-through\s+2023-01-02T00:00:00Z\s+b\s+a\s+expected`) {
		t.Fatalf("diff does not list the cell as expected:\n%s", out)
	}
	// Age GC shipped nothing.
	if v, _ := metric(t, aHTTP, `ebbtable_replication_gc_deletes_shipped_total{table="t"}`); v != 0 {
		t.Errorf("age GC shipped %v deletes", v)
	}

	// Versions GC is decided once, on the leader (a, the smallest id), and
	// reaches b's change stream as GARBAGE_COLLECTION from a.
	ebb(b, "changestream", "enable", "t").mustSucceed(t, "changestream enable on b")
	if err := aa.CreateColumnFamily(ctx, "t", "hist"); err != nil {
		t.Fatal(err)
	}
	if err := aa.SetGCPolicy(ctx, "t", "hist", bigtable.MaxVersionsPolicy(1)); err != nil {
		t.Fatal(err)
	}
	put("ip#685", "hist:c", day("2023-01-30"))
	put("ip#685", "hist:c", day("2023-01-31"))
	if err := aa.WaitForReplication(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	ebb(a, "gc", "run", "--table", "t", "--wait").mustSucceed(t, "gc run on a")
	if err := aa.WaitForReplication(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	bNow := strings.TrimSpace(ebb(b, "debug", "clock", "advance", "1s").mustSucceed(t, "debug clock").stdout)
	stream := ebb(b, "watch", "t", "--since", "oldest", "--until", bNow).mustSucceed(t, "watch on b").stdout
	if !regexpLine(stream, `"type":"GARBAGE_COLLECTION","reason":"gc-versions",.*"source_cluster_id":"a",.*"family":"hist"`) {
		t.Fatalf("b's change stream lacks a's versions collection:\n%s", stream)
	}
	if v, _ := metric(t, aHTTP, `ebbtable_replication_gc_deletes_shipped_total{table="t"}`); v < 1 {
		t.Errorf("versions GC shipped %v deletes", v)
	}

	// Raises: by 91 days refused, by 90 accepted.
	err := aa.SetGCPolicy(ctx, "t", "profile", bigtable.MaxAgePolicy(141*month))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "90") {
		t.Fatalf("91-day raise: %v", err)
	}
	if err := aa.SetGCPolicy(ctx, "t", "profile", bigtable.MaxAgePolicy(140*month)); err != nil {
		t.Fatalf("90-day raise: %v", err)
	}

	// A coordinated raise of "other" (a collected it alone first): every
	// cluster collects under the old rule at one instant, then the rule
	// changes; the clusters agree.
	ebb(a, "gc", "run", "--table", "t", "--wait").mustSucceed(t, "gc run on a")
	ebb(a, "gc", "raise", "t", "other", "maxage=60d", "--coordinated").mustSucceed(t, "gc raise --coordinated")
	for _, p := range []*serverProc{a, b, c} {
		ebb(p, "gc", "run", "--table", "t", "--wait").mustSucceed(t, "gc run")
	}
	other := `ebbtable_replication_gc_divergence_seconds{family="other",table="t"}`
	waitFor(t, "no divergence on other", func() (bool, string) {
		v, ok := metric(t, aHTTP, other)
		return ok && v == 0, fmt.Sprint(v, ok)
	})
	out = ebb(a, "replication", "diff", "t").mustSucceed(t, "replication diff").stdout
	if strings.Contains(out, "other:") {
		t.Fatalf("coordinated raise left differences:\n%s", out)
	}
	for _, p := range []*serverProc{a, b, c} {
		if code := p.terminate(t); code != 0 {
			t.Errorf("exit %d: %s", code, p.stderr.String())
		}
	}
}

// waitFor retries cond for up to 20 s (replication and collection run in
// the background of other processes).
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	testkit.Eventually(t, what, 20*time.Second, cond)
}

func regexpLine(out, re string) bool { return regexp.MustCompile(`(?m)` + re).MatchString(out) }
