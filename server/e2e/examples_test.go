package e2e

import (
	"os"
	"strings"
	"testing"

	"github.com/ebbtable/ebbtable/internal/testkit"
)

// TestExampleClickEvents runs examples/clickevents as a user does (go run
// ./examples/clickevents: its default fake clock) and checks that it prints
// examples/clickevents/output.txt: both approaches keep exactly the events
// the vendor page's example says, at each step; the shifted family has lost
// the click times, the native one has kept them.
//
// The check lives here, not beside the example, because a test there is a
// test binary of its own: linking it (the server, the official client and
// gRPC, with -race) cost about 4 CPU-seconds on each run of the suite,
// more than the example takes to run. This binary links all of it anyway.
func TestExampleClickEvents(t *testing.T) {
	t.Parallel()
	bin, err := testkit.Build("github.com/ebbtable/ebbtable/examples/clickevents", "clickevents")
	if err != nil {
		t.Fatal(err)
	}
	wantBytes, err := os.ReadFile("../../examples/clickevents/output.txt")
	if err != nil {
		t.Fatal(err)
	}
	r := testkit.Run(t, testkit.CleanEnv(home, "TMPDIR="+t.TempDir()), bin).MustSucceed(t, "clickevents")
	got, want := r.Stdout, string(wantBytes)
	if got == want {
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(gl) || i < len(wl); i++ {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Errorf("line %d:\n got %q\nwant %q", i+1, g, w)
		}
	}
}
