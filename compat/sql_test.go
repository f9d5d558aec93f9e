package compat

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/server"
)

// sqlProdTests are the official client's prod-mode tests of Bigtable SQL
// and views (issue 20).
var sqlProdTests = []string{
	"TestIntegration_Execute",
	"TestIntegration_AdminLogicalView",
	"TestIntegration_AdminMaterializedView",
	"TestIntegration_DataMaterializedView",
}

// TestOfficialSQLProdMode runs each SQL and view test of the official
// client in prod mode (-it.use-prod, reaching ebbtable through
// BIGTABLE_EMULATOR_HOST), each in its own process, and wants it to pass,
// not skip.
func TestOfficialSQLProdMode(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles and runs the client library's tests")
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "cloud.google.com/go/bigtable").Output()
	if err != nil {
		t.Fatalf("locate the client module: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	srv, err := server.New(server.Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, name := range sqlProdTests {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-v", "-run", "^"+name+"$", ".",
				"-args", "-it.use-prod", "-it.project", "p", "-it.instance", "i", "-it.cluster", "ebbtable")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "BIGTABLE_EMULATOR_HOST="+srv.Addr(), "GOFLAGS=-mod=mod")
			var buf bytes.Buffer
			cmd.Stdout, cmd.Stderr = &buf, &buf
			err := cmd.Run()
			if err != nil || !strings.Contains(buf.String(), "--- PASS: "+name) {
				t.Fatalf("%s in prod mode (%v):\n%s", name, err, tail(buf.String(), 60))
			}
		})
	}
}

// TestSQLQueryImportsNoGRPC keeps the query engine below the wall, as
// TestEngineImportsNoGRPC does for the other engine packages.
func TestSQLQueryImportsNoGRPC(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/ebbtable/ebbtable/sqlquery").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "google.golang.org/grpc") {
			t.Errorf("sqlquery depends on %s", dep)
		}
	}
}
