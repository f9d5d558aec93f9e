package compat

import (
	"strings"
	"testing"
)

// Parallel tests interleave their output; each line belongs to the test
// named by the last "=== …" header.
func TestParseResultsInterleaved(t *testing.T) {
	out := `=== RUN   TestA
=== PAUSE TestA
=== RUN   TestB
=== PAUSE TestB
=== CONT  TestA
=== CONT  TestB
    x_test.go:1: b says hello
=== NAME  TestA
    x_test.go:2: a failed here
--- FAIL: TestA (0.01s)
=== RUN   TestA/sub
--- PASS: TestB (0.02s)
FAIL
`
	res := parseResults(out)
	a, b := res["TestA"], res["TestB"]
	if a == nil || b == nil || a.passed || !b.passed {
		t.Fatalf("results: %+v", res)
	}
	if !strings.Contains(a.output, "a failed here") || strings.Contains(a.output, "b says hello") {
		t.Errorf("TestA's output: %q", a.output)
	}
	if !strings.Contains(b.output, "b says hello") {
		t.Errorf("TestB's output: %q", b.output)
	}
}
