package lint

import (
	"go/ast"
	"strings"
	"testing"
)

// TestClientsStayOnLoopback keeps the official client off the network in
// tests: a data client made without bigtable.NoopMetricsProvider exports
// built-in metrics, and setting that up asks the metadata server
// (169.254.169.254) for credentials. NewClient takes the default config, so
// tests call NewClientWithConfig with the provider set (testkit.Client does).
func TestClientsStayOnLoopback(t *testing.T) {
	t.Parallel()
	for _, f := range parseModule(t) {
		if !f.test && !strings.HasPrefix(f.dir, "internal/testkit") {
			continue
		}
		ast.Inspect(f.ast, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "bigtable" {
				return true
			}
			switch sel.Sel.Name {
			case "NewClient":
				t.Errorf("%s: bigtable.NewClient exports metrics (a metadata-server lookup); use NewClientWithConfig with NoopMetricsProvider, or testkit.Client", f.rel)
			case "NewClientWithConfig":
				if len(call.Args) < 4 {
					return true
				}
				lit, ok := call.Args[3].(*ast.CompositeLit)
				if !ok {
					return true // a config built elsewhere: not checked here
				}
				for _, e := range lit.Elts {
					if kv, ok := e.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "MetricsProvider" {
							return true
						}
					}
				}
				t.Errorf("%s: bigtable.NewClientWithConfig without a MetricsProvider exports metrics (a metadata-server lookup); set bigtable.NoopMetricsProvider{}", f.rel)
			}
			return true
		})
	}
}
