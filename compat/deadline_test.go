package compat

import (
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// In emulator mode some of the client's integration tests give their whole
// body a fixed two-second context (TestIntegration_Admin,
// TestIntegration_TableDeletionProtection: `timeout := 2 * time.Second`
// unless -it.use-prod). Against a three-node cluster on a loaded two-core
// machine (CI runs every package at once) TestIntegration_Admin takes 1 to
// 2 s, and it failed once with "DropRowRange x: context deadline
// exceeded" after 2.70 s; its next call (must) then panicked and ended the
// suite's process, so the tests still running reported no verdict. The
// budget is the client's, not ours: a test that failed on a context
// deadline runs again, alone, and so do the tests its panic cut short.

// deadlineFailure reports whether a failed test's output shows it ran out
// of its context's time.
func deadlineFailure(r *result) bool {
	return r != nil && !r.passed &&
		(strings.Contains(r.output, "context deadline exceeded") || strings.Contains(r.output, "code = DeadlineExceeded"))
}

// suiteRun runs the suite's tests whose names match the -test.run pattern
// run ("" for all of them) and returns their results and whole output.
type suiteRun func(run string) (map[string]*result, string)

// rerunDeadlines runs the suite once; if a test not in known failed on a
// context deadline, it runs that test again alone, with every test of
// names that the first run left without a verdict (cut short by the
// panic), and takes their results from the second run. The output it
// returns is both runs'. retried names the tests run again.
func rerunDeadlines(names []string, known map[string]expected, run suiteRun) (res map[string]*result, whole string, retried []string) {
	res, whole = run("")
	var late []string
	for name, r := range res {
		if _, listed := known[name]; !listed && deadlineFailure(r) {
			late = append(late, name)
		}
	}
	if len(late) == 0 {
		return res, whole, nil
	}
	retried = late
	for _, name := range names {
		if res[name] == nil {
			retried = append(retried, name)
		}
	}
	sort.Strings(retried)
	quoted := make([]string, len(retried))
	for i, n := range retried {
		quoted[i] = regexp.QuoteMeta(n)
	}
	again, out := run("^(" + strings.Join(quoted, "|") + ")$")
	for _, name := range retried {
		res[name] = again[name]
		if res[name] == nil {
			delete(res, name)
		}
	}
	return res, whole + "\n[compat: run again: " + strings.Join(retried, " ") + "]\n" + out, retried
}

// runEmulatorSuite runs the suite in emulator mode against addr (every
// test but noNetwork's, in one process), running again the tests that
// failed on the client's own short deadlines (rerunDeadlines).
func runEmulatorSuite(t *testing.T, suite, dir, addr string, known map[string]expected) (map[string]*result, string) {
	t.Helper()
	names := listTests(t, suite, dir)
	res, out, retried := rerunDeadlines(names, known, func(run string) (map[string]*result, string) {
		if run == "" {
			run = "^TestIntegration_"
		}
		return runSuite(t, suite, dir, addr, 5*time.Minute, "-test.run", run, "-test.skip", noNetwork)
	})
	if len(retried) > 0 {
		t.Logf("ran again after a context deadline in the client's suite (its 2 s budgets; see compat/deadline_test.go): %s", strings.Join(retried, " "))
	}
	return res, out
}

// TestRerunDeadlines: a test that failed on a context deadline runs again
// alone with the tests its panic left without a verdict, and their second
// results count; other failures, and known ones, do not run again.
func TestRerunDeadlines(t *testing.T) {
	names := []string{"TestIntegration_A", "TestIntegration_Admin", "TestIntegration_Known", "TestIntegration_Late", "TestIntegration_Other"}
	known := map[string]expected{"TestIntegration_Known": {want: "boom"}}
	var runs []string
	run := func(pattern string) (map[string]*result, string) {
		runs = append(runs, pattern)
		if pattern == "" {
			return map[string]*result{
				"TestIntegration_A":     {passed: true},
				"TestIntegration_Admin": {output: "integration_test.go:2145: DropRowRange x: rpc error: code = DeadlineExceeded desc = context deadline exceeded\npanic: ..."},
				"TestIntegration_Other": {output: "some real failure"},
			}, "first"
		}
		return map[string]*result{
			"TestIntegration_Admin": {passed: true},
			"TestIntegration_Known": {output: "boom"},
		}, "second"
	}
	res, whole, retried := rerunDeadlines(names, known, run)
	if len(runs) != 2 || runs[1] != "^(TestIntegration_Admin|TestIntegration_Known|TestIntegration_Late)$" {
		t.Fatalf("runs: %q", runs)
	}
	if strings.Join(retried, " ") != "TestIntegration_Admin TestIntegration_Known TestIntegration_Late" {
		t.Errorf("retried %q", retried)
	}
	if !res["TestIntegration_Admin"].passed || res["TestIntegration_Other"].passed || !res["TestIntegration_A"].passed {
		t.Errorf("results: %+v", res)
	}
	if res["TestIntegration_Known"] == nil || res["TestIntegration_Late"] != nil {
		t.Errorf("a test the second run left without a verdict must stay without one: %+v", res)
	}
	if !strings.Contains(whole, "first") || !strings.Contains(whole, "second") {
		t.Errorf("output %q, want both runs'", whole)
	}

	// No deadline failure: one run, nothing run again.
	runs = nil
	res, _, retried = rerunDeadlines(names, known, func(string) (map[string]*result, string) {
		runs = append(runs, "")
		return map[string]*result{"TestIntegration_Other": {output: "context canceled"}}, ""
	})
	if len(runs) != 1 || retried != nil || res["TestIntegration_Other"].passed {
		t.Errorf("runs %q, retried %q", runs, retried)
	}
}
