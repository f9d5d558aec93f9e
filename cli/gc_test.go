package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
)

// gcClients connects the official clients through conn.go (no
// BIGTABLE_EMULATOR_HOST, so tests can run in parallel) to the instance the
// gc commands default to.
func gcClients(t *testing.T, addr string) (*bigtable.Client, *bigtable.AdminClient) {
	t.Helper()
	ctx := context.Background()
	cf := connFlags{addr: addr, project: "ebbtable", instance: "ebbtable"}
	admin, err := cf.adminClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	client, err := cf.dataClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client, admin
}

// wantMatch checks that output matches the multi-line regular expression re.
func wantMatch(t *testing.T, what, output, re string) {
	t.Helper()
	if !regexp.MustCompile(re).MatchString(output) {
		t.Errorf("%s: output does not match %s:\n%s", what, re, output)
	}
}

// TestGCCommands drives gc plan, run and status against a server whose
// background passes are an hour apart, so only explicit runs collect.
func TestGCCommands(t *testing.T) {
	t.Parallel()
	srv := startServe(t, "serve", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", t.TempDir(),
		"--gc-interval", "1h", "--gc-batch-cells", "2", "--gc-pause", "1ms")
	at := func(args ...string) []string { return append(args, "--addr", srv.addr) }
	ctx := context.Background()
	client, admin := gcClients(t, srv.addr)

	conf := &bigtable.TableConf{TableID: "t", ColumnFamilies: map[string]bigtable.Family{
		"cf": {GCPolicy: bigtable.MaxVersionsPolicy(2)},
	}}
	if err := admin.CreateTableFromConf(ctx, conf); err != nil {
		t.Fatal(err)
	}
	tbl := client.Open("t")
	m := bigtable.NewMutation()
	for i := range 5 {
		m.Set("cf", "c", msAfter(baseTS, i), []byte(fmt.Sprintf("v%d", i)))
	}
	if err := tbl.Apply(ctx, "r", m); err != nil {
		t.Fatal(err)
	}

	// Nothing collected yet: maxversions=1 would make 4 of the 5 versions
	// eligible, the current maxversions=2 makes 3.
	r := ebbtable(t, at("gc", "plan", "t", "cf", "maxversions=1")...).mustSucceed(t, "gc plan")
	wantMatch(t, "gc plan", r.stdout, `(?m)^rule\s+versions\(\) > 1$`)
	wantMatch(t, "gc plan", r.stdout, `(?m)^eligible under rule\s+4 cells \(\d+ B\)$`)
	wantMatch(t, "gc plan", r.stdout, `(?m)^eligible under current rule\s+3 cells \(\d+ B\)$`)
	wantMatch(t, "gc plan", r.stdout, `(?m)^examined\s+5 cells$`)
	r = ebbtable(t, at("gc", "plan", "t", "cf", "maxage=30d || maxversions=2", "--json")...).mustSucceed(t, "gc plan --json")
	var plan struct {
		Cells          int64  `json:"cells"`
		Bytes          int64  `json:"bytes"`
		CurrentlyCells int64  `json:"currently_cells"`
		Rule           string `json:"rule"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil {
		t.Fatalf("gc plan --json: %v\n%s", err, r.stdout)
	}
	// The 2024 timestamps are older than 30 days: all 5 cells.
	if plan.Cells != 5 || plan.Bytes <= 0 || plan.CurrentlyCells != 3 || plan.Rule != "(age() > 30d || versions() > 2)" {
		t.Errorf("gc plan --json = %+v, want 5 cells, some bytes, 3 currently, the rule as the client prints it", plan)
	}

	// The default visibility hides the eligible versions before collection.
	row, err := tbl.ReadRow(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if got := row["cf"]; len(got) != 2 || got[0].Timestamp != msAfter(baseTS, 4) || got[1].Timestamp != msAfter(baseTS, 3) {
		t.Errorf("read before gc run = %v, want the 2 newest versions", got)
	}

	r = ebbtable(t, at("gc", "run", "--table", "t", "--wait")...).mustSucceed(t, "gc run")
	wantMatch(t, "gc run", r.stdout, `^1 table: examined 5 cells, collected 3 cells \(\d+ B\) in \S+\n`+
		`sweep \S+ \(\S+ examined/s, \S+ collected/s\); \d+ B pending in 1 table \(deletions too few or too sparse to compact for\): Pebble's compactions free that space\n$`)
	r = ebbtable(t, at("gc", "plan", "t", "cf", "maxversions=1")...).mustSucceed(t, "gc plan after run")
	wantMatch(t, "gc plan after run", r.stdout, `(?m)^eligible under rule\s+1 cell \(`)
	wantMatch(t, "gc plan after run", r.stdout, `(?m)^eligible under current rule\s+0 cells \(0 B\)$`)
	wantMatch(t, "gc plan after run", r.stdout, `(?m)^examined\s+2 cells$`)

	r = ebbtable(t, at("gc", "status")...).mustSucceed(t, "gc status")
	wantMatch(t, "gc status", r.stdout, `(?m)^interval\s+1h0m0s$`)
	wantMatch(t, "gc status", r.stdout, `(?m)^visibility\s+hidden$`)
	wantMatch(t, "gc status", r.stdout, `(?m)^TABLE\s+FAMILY\s+RULE\s+AGE CUTOFF\s+LAST PASS\s+EXAMINED\s+COLLECTED\s+COLLECTED BYTES\s+DEBT CELLS\s+DEBT BYTES\s+DEBT OLDEST\s+LOGICAL BYTES\s+DISK BYTES\s+RECLAIM\s+PASS\s+WAITING\s+HIDDEN VERSIONS$`)
	// The pass examined 5 cells and collected 3. Debt is measured live by
	// status: nothing eligible is left. It was a full scan (the rule counts
	// versions), so logical bytes are known.
	wantMatch(t, "gc status", r.stdout, `(?m)^t\s+cf\s+versions\(\) > 2\s+-\s+\d{4}-\d\d-\d\dT[\d:.]+Z\s+5\s+3\s+\d+ B\s+0\s+0 B\s+-\s+[1-9]\d* B\s+\d+`)

	r = ebbtable(t, at("gc", "status", "--json")...).mustSucceed(t, "gc status --json")
	var st struct {
		IntervalSeconds float64 `json:"interval_seconds"`
		Visibility      string  `json:"visibility"`
		Tables          []struct {
			Table     string `json:"table"`
			Collected int64  `json:"collected"`
			Families  []struct {
				Name string `json:"name"`
				Rule string `json:"rule"`
			} `json:"families"`
		} `json:"tables"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("gc status --json: %v\n%s", err, r.stdout)
	}
	if st.IntervalSeconds != 3600 || st.Visibility != "hidden" || len(st.Tables) != 1 ||
		st.Tables[0].Table != "t" || st.Tables[0].Collected != 3 ||
		len(st.Tables[0].Families) != 1 || st.Tables[0].Families[0].Rule != "versions() > 2" {
		t.Errorf("gc status --json = %+v\n%s", st, r.stdout)
	}

	wantFailure(t, "gc plan maxversions=0", ebbtable(t, at("gc", "plan", "t", "cf", "maxversions=0")...), 2, "maxversions=0", "at least 1 version")
	wantFailure(t, "gc plan unknown unit", ebbtable(t, at("gc", "plan", "t", "cf", "maxage=30x")...), 2, `unknown unit "x"`)
	wantFailure(t, "gc plan missing family", ebbtable(t, at("gc", "plan", "t", "nofam", "maxversions=1")...), 1, "NotFound", "nofam")
	wantFailure(t, "gc plan missing table", ebbtable(t, at("gc", "plan", "missing", "cf", "maxversions=1")...), 1, "NotFound", "missing")
	wantFailure(t, "gc plan without a rule", ebbtable(t, at("gc", "plan", "t", "cf")...), 2, "plan takes a table, a column family and a GC rule")
	wantFailure(t, "gc run missing table", ebbtable(t, at("gc", "run", "--table", "missing")...), 1, "NotFound", "table not found: missing")
	wantFailure(t, "gc run --wait=false", ebbtable(t, at("gc", "run", "--wait=false")...), 2, "always returns when the pass is done")
	wantFailure(t, "gc run --table ''", ebbtable(t, at("gc", "run", "--table", "")...), 2, "--table must not be empty")
	wantFailure(t, "gc unknown subcommand", ebbtable(t, at("gc", "sweep")...), 2, "gc takes a subcommand")

	if code := srv.terminate(t); code != 0 {
		t.Errorf("serve exited %d after SIGTERM; stderr:\n%s", code, srv.stderr.String())
	}
	// The --gc-* flags reach the server (the log is complete once the
	// process is reaped).
	if log := srv.stderr.String(); !strings.Contains(log, "gc_interval=1h0m0s gc_batch_cells=2 gc_pause=1ms") {
		t.Errorf("serve log lacks the gc flags:\n%s", log)
	}
}

// TestGCServeFlags covers the validation of serve's --gc-* flags and the
// gc commands' place in --help.
func TestGCServeFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"negative interval", []string{"--gc-interval", "-1s"}, "--gc-interval -1s must be positive"},
		{"zero interval", []string{"--gc-interval", "0"}, "--gc-interval 0s must be positive"},
		{"interval without unit", []string{"--gc-interval", "5"}, "--gc-interval"},
		{"negative batch", []string{"--gc-batch-cells", "-1"}, "--gc-batch-cells -1 must be between 1 and"},
		{"zero batch", []string{"--gc-batch-cells", "0"}, "--gc-batch-cells 0 must be between 1 and"},
		{"negative pause", []string{"--gc-pause", "-1ms"}, "--gc-pause -1ms is negative"},
		{"negative reclaim rate", []string{"--gc-reclaim-rate", "-1"}, "--gc-reclaim-rate -1 is negative"},
		{"zero go gc percent", []string{"--go-gc-percent", "0"}, "--go-gc-percent 0 must be positive"},
	} {
		r := ebbtable(t, append([]string{"serve", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", dir}, tc.args...)...)
		wantFailure(t, tc.name, r, 2, tc.msg, "--help")
	}

	r := ebbtable(t, "--help").mustSucceed(t, "--help")
	if !strings.Contains(r.stdout, "\n  gc ") {
		t.Errorf("--help does not list gc:\n%s", r.stdout)
	}
	r = ebbtable(t, "gc", "run", "--help").mustSucceed(t, "gc run --help")
	for _, s := range []string{"--table", "--wait", "--addr", "returns when the pass is done"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("gc run --help lacks %q:\n%s", s, r.stdout)
		}
	}
	r = ebbtable(t, "serve", "--help").mustSucceed(t, "serve --help")
	for _, s := range []string{"--gc-interval duration", "(default 1m0s)", "--gc-batch-cells int", "(default 250)", "--go-gc-percent int", "(default 400)", "--gc-reclaim-rate float", "(default 4)", "--gc-pause duration"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("serve --help lacks %q:\n%s", s, r.stdout)
		}
	}
}

// freeAddr returns a loopback address that was free a moment ago (serve
// does not print its metrics address, so the test picks it).
func freeAddr(t *testing.T) string {
	t.Helper()
	return testkit.FreeAddr(t)
}
