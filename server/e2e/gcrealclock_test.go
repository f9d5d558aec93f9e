package e2e

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/internal/testkit/servertest"
	"github.com/ebbtable/ebbtable/server"
	"github.com/ebbtable/ebbtable/table"
)

// TestGCRealClock runs the background collector on the real clock with a
// short interval: a cell under a one-second max age stays readable (in the
// until-collected mode) until a pass collects it, and the metrics say so.
// (The serve flags that set the interval and the mode are cli's tests.)
func TestGCRealClock(t *testing.T) {
	t.Parallel()
	httpAddr := testkit.FreeAddr(t)
	env := servertest.Start(t, servertest.RealClock(), servertest.WithOptions(func(o *server.Options) {
		o.HTTPAddr = httpAddr
		o.ConsoleOff = true
		o.GC.Interval = 200 * time.Millisecond
		o.Visibility = table.UntilCollected
	}))
	ctx := context.Background()
	tbl := env.CreateTable("ttl", map[string]bigtable.GCPolicy{"cf": bigtable.MaxAgePolicy(time.Second)})
	m := bigtable.NewMutation()
	m.Set("cf", "c", bigtable.Now().TruncateToMilliseconds(), []byte("soon gone"))
	if err := tbl.Apply(ctx, "r", m); err != nil {
		t.Fatal(err)
	}
	cells := func() int {
		t.Helper()
		row, err := tbl.ReadRow(ctx, "r")
		if err != nil {
			t.Fatal(err)
		}
		return len(row["cf"])
	}
	if n := cells(); n != 1 {
		t.Fatalf("read right after the write: %d cells, want 1", n)
	}

	collected := regexp.MustCompile(`(?m)^ebbtable_gc_cells_collected_total\{[^}]*reason="age"[^}]*table="ttl"[^}]*\} 1$`)
	httpc := &http.Client{Timeout: 2 * time.Second}
	metrics := func() string {
		t.Helper()
		resp, err := httpc.Get("http://" + httpAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var page string
	if !testkit.Poll(10*time.Second, func() bool { page = metrics(); return collected.MatchString(page) }) {
		t.Fatalf("no age collection in the metrics after 10s; cells readable: %d; metrics:\n%s", cells(), grepLines(page, "ebbtable_gc_"))
	}
	if n := cells(); n != 0 {
		t.Fatalf("the metrics count the cell collected, but a read returns %d cells", n)
	}
}

// grepLines returns the lines of s that contain substr.
func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
