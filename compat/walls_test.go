package compat

import (
	"os/exec"
	"strings"
	"testing"
)

// TestEngineImportsNoGRPC keeps the architecture's wall: nothing below the
// server package depends on gRPC, or imports net/http itself (Pebble and
// the Prometheus client bring net/http in transitively; our code does not
// serve or call HTTP below the server).
func TestEngineImportsNoGRPC(t *testing.T) {
	pkgs := []string{"cell", "clock", "storage", "gcrule", "filter", "table", "collector", "changestream", "backup", "rowttl", "schedule", "progress"}
	for _, p := range pkgs {
		path := "github.com/ebbtable/ebbtable/" + p
		out, err := exec.Command("go", "list", "-deps", path).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", p, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "google.golang.org/grpc") {
				t.Errorf("package %s depends on %s", p, dep)
			}
		}
		out, err = exec.Command("go", "list", "-f", `{{join .Imports " "}}`, path).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", p, err)
		}
		for _, imp := range strings.Fields(string(out)) {
			if imp == "net/http" || strings.HasPrefix(imp, "net/http/") {
				t.Errorf("package %s imports %s", p, imp)
			}
		}
	}
}
