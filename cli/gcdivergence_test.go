package cli

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
)

// TestReplicationCommands drives the commands of the GC-divergence story
// on two processes whose clocks the test moves (serve --debug-clock) and
// checks what they print and their exit codes: debug clock set and
// advance, gc run, gc status's age cutoff, replication diff's line for a
// cell one cluster collected and the other kept, gc raise --coordinated.
// What the servers do along the story (the divergence gauge, what GC
// ships, versions GC from the leader, the 90-day bound) is server/e2e's
// TestSeedDivergenceStory.
func TestReplicationCommands(t *testing.T) {
	t.Parallel() // its clocks are the servers' --debug-clock, not the machine's
	ctx := context.Background()
	serve := func(id, join string) *serverProc {
		args := []string{"serve", "--cluster-id", id, "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", t.TempDir(),
			"--debug-clock", "2023-01-02T00:00:00Z", "--gc-interval", "1000h", "--ballast-size", "0"}
		if join != "" {
			args = append(args, "--join", join)
		}
		return startServe(t, args...)
	}
	a := serve("a", "")
	ca, aa := clientsAt(t, a.addr)
	day := 24 * time.Hour
	if err := aa.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", ColumnFamilies: map[string]bigtable.Family{
		"profile": {GCPolicy: bigtable.MaxAgePolicy(30 * day)},
		"other":   {GCPolicy: bigtable.MaxAgePolicy(30 * day)},
	}}); err != nil {
		t.Fatal(err)
	}
	b := serve("b", a.addr)
	_, ab := clientsAt(t, b.addr)
	m := bigtable.NewMutation()
	m.Set("profile", "click-through", bigtable.Time(time.Date(2023, 1, 2, 0, 0, 0, 0, time.UTC)), []byte("v"))
	if err := ca.Open("t").Apply(ctx, "ip#685", m); err != nil {
		t.Fatal(err)
	}
	if err := aa.WaitForReplication(ctx, "t"); err != nil {
		t.Fatal(err)
	}

	ebb := func(p *serverProc, args ...string) result {
		t.Helper()
		return run(t, nil, ebbtableBin, append(args, "--addr", p.addr, "--project", testProject, "--instance", testInstance)...)
	}
	// Day 31 on both clusters.
	setAt := time.Now()
	for _, p := range []*serverProc{a, b} {
		out := ebb(p, "debug", "clock", "set", "2023-02-02T00:00:00Z").mustSucceed(t, "debug clock set").stdout
		// The clock runs on from the moment set.
		if !strings.HasPrefix(out, "2023-02-02T00:00:00") {
			t.Errorf("debug clock set printed %q", out)
		}
	}
	// a collects the cell under the 30-day rule.
	ebb(a, "gc", "run", "--table", "t", "--wait").mustSucceed(t, "gc run on a")
	// The cutoff is the pass's time less 30 days, and a's clock ran on
	// from 2023-02-02T00:00:00 for what has passed since the set: more
	// than a second at load 50 (b's set and the gc run are processes).
	out := ebb(a, "gc", "status").mustSucceed(t, "gc status").stdout
	since := time.Since(setAt)
	m1 := regexp.MustCompile(`(?m)profile\s.*?(2023-\S+Z)`).FindStringSubmatch(out)
	if m1 == nil {
		t.Fatalf("gc status on a shows no age cutoff for profile:\n%s", out)
	}
	low := time.Date(2023, 1, 3, 0, 0, 0, 0, time.UTC)
	if at, err := time.Parse(time.RFC3339Nano, m1[1]); err != nil || at.Before(low) || at.After(low.Add(since)) {
		t.Fatalf("gc status on a: age cutoff %s, want 2023-01-03T00:00:00Z + at most %v (the time since the clock was set):\n%s", m1[1], since, out)
	}
	// The rule goes to 50 days and reaches b, which collects after the
	// change and keeps the cell.
	if err := aa.SetGCPolicy(ctx, "t", "profile", bigtable.MaxAgePolicy(50*day)); err != nil {
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
	ebb(b, "gc", "run", "--table", "t", "--wait").mustSucceed(t, "gc run on b")
	out = ebb(a, "replication", "diff", "t").mustSucceed(t, "replication diff").stdout
	if !regexpLine(out, `ip#685\s+profile:click-through\s+2023-01-02T00:00:00Z\s+b\s+a\s+expected`) {
		t.Fatalf("diff does not list the cell as expected:\n%s", out)
	}
	bNow := strings.TrimSpace(ebb(b, "debug", "clock", "advance", "1s").mustSucceed(t, "debug clock advance").stdout)
	if at, err := time.Parse(time.RFC3339Nano, bNow); err != nil || at.Before(time.Date(2023, 2, 2, 0, 0, 1, 0, time.UTC)) || at.After(time.Date(2023, 2, 2, 0, 1, 0, 0, time.UTC)) {
		t.Errorf("debug clock advance 1s printed %q", bNow)
	}
	// A coordinated raise of "other": every cluster in step.
	out = ebb(a, "gc", "raise", "t", "other", "maxage=60d", "--coordinated").mustSucceed(t, "gc raise --coordinated").stdout
	if !strings.Contains(out, "other") || !strings.Contains(out, "2 clusters") {
		t.Errorf("gc raise --coordinated printed:\n%s", out)
	}
	for _, p := range []*serverProc{a, b} {
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
