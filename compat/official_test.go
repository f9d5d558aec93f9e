package compat

import (
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// expected is an integration test known to fail against ebbtable: why, and
// a piece of its output that shows it failed for that reason (so a failure
// for another reason is still a regression).
type expected struct {
	reason string
	want   string
}

// emulatorFailures are the emulator-mode tests expected to fail.
var emulatorFailures = map[string]expected{
	"TestIntegration_LargeReadsWritesAndScans": largeRead,
}

// largeRead cannot pass against any server: through BIGTABLE_EMULATOR_HOST
// the client dials with gRPC's default 4 MiB receive limit (its 256 MiB call
// options go to a dial that a pre-dialled connection replaces), so a 5 MiB
// cell cannot come in one response; and the v1.58.0 client calls
// chunkReader.Close after every ReadRowsResponse (bigtable.go, readRows),
// which refuses a row left open at the end of a response ("invalid state for
// end of stream"), so the cell cannot come in several either. See
// docs/compatibility.md.
var largeRead = expected{
	reason: "the client reads through a 4 MiB receive limit and refuses a row split across responses",
	want:   "received message larger than max (5243015 vs. 4194304)",
}

// prodFailures are the prod-mode tests expected to fail, each with why.
// TestIntegration_ExportBuiltInMetrics is not run at all (noNetwork): it
// exports the client's metrics to Google Cloud Monitoring, and looking for
// the Google credentials it needs calls the metadata server.
var prodFailures = map[string]expected{
	"TestIntegration_LargeReadsWritesAndScans": largeRead,
	"TestIntegration_AdminEncryptionInfo": {
		reason: "needs a Cloud KMS key ring (customer-managed encryption keys)",
		want:   "GCLOUD_TESTS_BIGTABLE_KEYRING",
	},
}

// serialSubtests are the suite's tests whose parallel subtests race in
// the test itself, so they run with -test.parallel=1 (in prod mode; in
// emulator mode they return early). TestIntegration_InstanceAdminClient_CreateAppProfile's
// seven parallel subtests each fill one shared 4-byte buffer with
// cryptorand.Read and then format it into their profile id (v1.58.0
// integration_test.go, uniqueID): two of them can format the same bytes
// and the second create fails, rightly, with AlreadyExists (seen once:
// "app profile .../app_profile_id05bf8fa5 already exists").
var serialSubtests = map[string]string{
	"TestIntegration_InstanceAdminClient_CreateAppProfile": "subtests share the buffer of their random profile id",
}

// noNetwork are the suite's tests the emulator-mode runs leave out: the
// session tests (see below) and the metrics export, which, even when it
// ends by skipping itself, first looks for Google credentials on the
// metadata server, off this machine. Tests talk to loopback only.
const noNetwork = "^(TestIntegration_SessionVRpc_|TestIntegration_ExportBuiltInMetrics$)"

// TestEmulatorMode runs the client's integration suite as the client runs
// it against an emulator: every test in one process, against one fresh
// ebbtable. Tests that need a real instance skip themselves.
func TestEmulatorMode(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the client library's suite")
	}
	t.Parallel() // each runs its own servers; the suites wait more than they compute
	ebb, suite, dir := binaries(t)
	addr := serve(t, ebb)
	res, out := runEmulatorSuite(t, suite, dir, addr, emulatorFailures)
	passed := judge(t, res, emulatorFailures, out)
	skipped := 0
	for _, r := range res {
		if r.skipped {
			skipped++
		}
	}
	t.Logf("emulator mode: %d of %d passed (%d of them skip themselves: they need a real instance)", passed, len(res), skipped)
	if len(res) < 30 {
		t.Fatalf("only %d integration tests reported; the suite did not really run:\n%s", len(res), tail(out, 60))
	}
}

// TestProdMode runs each of the client's integration tests in prod mode
// (-it.use-prod: the tests that need a real instance run too), each in its
// own process, so a panic ends one test only, and all against one
// ebbtable, as the suite runs against one real instance (its tests name
// their tables, clusters and profiles apart). A server per test cost a
// serve start each (about 0.12 CPU-s, 38 of them), more than half of the
// test's CPU.
func TestProdMode(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the client library's suite")
	}
	t.Parallel() // each runs its own servers; the suites wait more than they compute
	ebb, suite, dir := binaries(t)
	names := listTests(t, suite, dir)
	addr := serve(t, ebb)
	results := map[string]*result{}
	outs := map[string]string{}
	sem := make(chan struct{}, 3)
	t.Run("each", func(t *testing.T) {
		for _, name := range names {
			t.Run(strings.TrimPrefix(name, "TestIntegration_"), func(t *testing.T) {
				t.Parallel()
				sem <- struct{}{}
				defer func() { <-sem }()
				args := []string{"-test.run", "^" + name + "$",
					"-it.use-prod", "-it.project", "p", "-it.instance", "i", "-it.cluster", "ebbtable"}
				if _, ok := serialSubtests[name]; ok {
					args = append(args, "-test.parallel=1")
				}
				res, out := runSuite(t, suite, dir, addr, 3*time.Minute, args...)
				r := res[name]
				if r == nil {
					r = &result{output: out} // a panic or a timeout: no verdict line
				}
				mu.Lock()
				results[name], outs[name] = r, out
				mu.Unlock()
			})
		}
	})
	passed := judge(t, results, prodFailures, "")
	skipped := 0
	for _, r := range results {
		if r.skipped {
			skipped++
		}
	}
	t.Logf("prod mode: %d of %d passed (%d of them skip themselves)", passed, len(names), skipped)
}

// listTests lists the suite's integration tests but noNetwork's: the
// session-protocol tests (they run against an in-process fake, never a
// server) and the metrics export.
func listTests(t *testing.T, suite, dir string) []string {
	cmd := exec.Command(suite, "-test.list", "^TestIntegration_")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("listing the suite's tests: %v", err)
	}
	var names []string
	for _, n := range strings.Fields(string(out)) {
		if !regexp.MustCompile(noNetwork).MatchString(n) {
			names = append(names, n)
		}
	}
	if len(names) < 30 {
		t.Fatalf("the suite lists only %d integration tests: %q", len(names), names)
	}
	return names
}

// judge compares results with the expected failures: an unlisted failure,
// a listed test that passes, and a listed failure that no longer shows its
// reason all fail t. It returns how many tests passed.
func judge(t *testing.T, res map[string]*result, known map[string]expected, whole string) int {
	t.Helper()
	names := make([]string, 0, len(res))
	for n := range res {
		names = append(names, n)
	}
	sort.Strings(names)
	passed := 0
	for _, name := range names {
		r := res[name]
		exp, listed := known[name]
		switch {
		case r.passed && listed:
			t.Errorf("%s passes now: remove it from the expected failures (%s)", name, exp.reason)
		case r.passed:
			passed++
			if *keepLogs {
				t.Logf("%s:\n%s", name, r.output)
			}
		case !listed:
			t.Errorf("%s failed:\n%s", name, tail(r.output, 40))
		case exp.want != "" && !strings.Contains(r.output, exp.want):
			t.Errorf("%s failed, but not for its known reason (%s; want %q in its output):\n%s", name, exp.reason, exp.want, tail(r.output, 40))
		default:
			t.Logf("%s fails as expected: %s", name, exp.reason)
		}
	}
	for name := range known {
		if whole != "" && res[name] == nil && regexp.MustCompile(`(?m)^=== RUN\s+`+name+`$`).MatchString(whole) {
			t.Errorf("%s ran but reported no verdict:\n%s", name, tail(whole, 40))
		}
	}
	return passed
}
