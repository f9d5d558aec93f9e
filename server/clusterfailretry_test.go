package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/internal/testkit"
)

// A take-over whose directory flip loses to a concurrent change (seen in
// starved runs: a peer's lease lapsed and it registered again) is retried
// at once, not refused for a minute by the spans its own failed attempt
// left pending ("n3's checkpoint reaches rows this node serves").
func TestFailoverRetryAfterFlipConflict(t *testing.T) {
	t.Parallel()
	sc := startFailoverCluster(t)
	ctx := context.Background()
	n1, n2, n3 := sc.nodes["n1"], sc.nodes["n2"], sc.nodes["n3"]
	sc.createTable(t, "n1", "g", "p")
	if got := owners(t, n1); !strings.Contains(got, "[p,)n3") {
		t.Fatalf("tablets: %s", got)
	}
	tbl := n1.client.Open("t")
	want := map[string]string{}
	for i := range 20 {
		row := fmt.Sprintf("%c-%03d", 'a'+i%26, i)
		if err := writeScale(t, tbl, row, "v"+row); err != nil {
			t.Fatal(err)
		}
		want[row] = "v" + row
	}
	// n3's checkpoint covers its tablet: the retry's overlap check
	// (checkpoints against rows this node serves or takes) applies.
	fullRound(t, n3)
	// The first flip of the take-over finds the directory changed under
	// it: the taker's view is held back while the other survivor rewrites
	// the directory (same tablets, a new revision).
	var (
		mu       sync.Mutex
		conflict bool
		releases []func()
	)
	release := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range releases {
			r()
		}
		releases = nil
	}
	t.Cleanup(release)
	for _, pair := range [][2]*scaleNode{{n1, n2}, {n2, n1}} {
		self, other := pair[0], pair[1]
		stage := func(s string) {
			mu.Lock()
			first := !conflict && s == "flip"
			conflict = conflict || first
			mu.Unlock()
			if !first {
				release()
				return
			}
			r := self.srv.cluster.m.HoldWatch()
			mu.Lock()
			releases = append(releases, r)
			mu.Unlock()
			d, ok := other.srv.cluster.m.Directory(scaleTable)
			if !ok {
				t.Error("no directory of t on", other.id)
				return
			}
			if _, err := other.srv.cluster.m.UpdateDirectory(ctx, d, d.Clone()); err != nil {
				t.Errorf("rewrite t's directory through %s: %v", other.id, err)
			}
		}
		self.srv.cluster.fail.stageHook.Store(&stage)
	}
	n3.crash()
	// Lease expiry (1 s TTL) and the 2 s retry pause take a few seconds
	// on a loaded machine; a refused retry waits a minute.
	testkit.Eventually(t, "n3's tablet to be taken over after a failed flip", 30*time.Second, func() (bool, string) {
		got := owners(t, n1)
		if strings.Contains(got, "n3") {
			return false, got + "; " + failoverState(n1, n2)
		}
		return true, got
	})
	release()
	mu.Lock()
	hit := conflict
	mu.Unlock()
	if !hit {
		t.Fatal("no take-over reached its flip")
	}
	for _, n := range []*scaleNode{n1, n2} {
		n.srv.cluster.fail.stageHook.Store(nil)
	}
	_, got := readScale(t, n2)
	for r, v := range want {
		if got[r] != v {
			t.Errorf("row %s = %q after the take-over, want %q", r, got[r], v)
		}
	}
}
