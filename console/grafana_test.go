package console_test

import (
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/ebbtable/ebbtable/server"
	"github.com/prometheus/client_golang/prometheus"
)

var metricName = regexp.MustCompile(`\bebbtable_[a-z0-9_]+`)

// registeredMetrics is every ebbtable_* metric a server registers (vectors
// with no series yet included).
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	srv, err := server.New(server.Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: t.TempDir(), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ch := make(chan *prometheus.Desc, 1024)
	go func() { reg.Describe(ch); close(ch) }()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	out := map[string]bool{}
	for d := range ch {
		if m := fq.FindStringSubmatch(d.String()); m != nil && strings.HasPrefix(m[1], "ebbtable_") {
			out[m[1]] = true
		}
	}
	if len(out) < 20 {
		t.Fatalf("only %d ebbtable metrics registered: %v", len(out), out)
	}
	return out
}

// queries walks the dashboard and returns every PromQL expression in it
// (panel targets and template variable queries).
func queries(v any, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if s, ok := val.(string); ok && (k == "expr" || k == "definition") {
				*out = append(*out, s)
				continue
			}
			queries(val, out)
		}
	case []any:
		for _, val := range x {
			queries(val, out)
		}
	}
}

// TestGrafanaDashboard checks docs/grafana/ebbtable.json against the
// server's registry both ways: every metric the dashboard queries exists,
// and every ebbtable metric the server exports is on the dashboard.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile("../docs/grafana/ebbtable.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string           `json:"title"`
		Panels []map[string]any `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	var all any
	json.Unmarshal(raw, &all)
	var exprs []string
	queries(all, &exprs)
	if len(exprs) < 30 {
		t.Fatalf("only %d queries in the dashboard", len(exprs))
	}
	reg := registeredMetrics(t)
	used := map[string]bool{}
	for _, e := range exprs {
		if strings.Count(e, "(") != strings.Count(e, ")") || strings.Count(e, "{") != strings.Count(e, "}") {
			t.Errorf("unbalanced query: %s", e)
		}
		for _, name := range metricName.FindAllString(e, -1) {
			base := name
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(name, suf); ok && reg[b] {
					base = b
				}
			}
			if !reg[base] {
				t.Errorf("the dashboard queries %s, which the server does not export (in %s)", name, e)
			}
			used[base] = true
		}
	}
	var missing []string
	for name := range reg {
		if !used[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("metrics the server exports that the dashboard does not show: %v", missing)
	}
	ids := map[float64]bool{}
	for _, p := range dash.Panels {
		id, _ := p["id"].(float64)
		if ids[id] {
			t.Errorf("panel id %v used twice", id)
		}
		ids[id] = true
		g, _ := p["gridPos"].(map[string]any)
		if x, w := g["x"].(float64), g["w"].(float64); x+w > 24 {
			t.Errorf("panel %q overflows the grid: %v", p["title"], g)
		}
	}
}
