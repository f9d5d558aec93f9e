package cli

import (
	"context"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"google.golang.org/grpc"
)

// clientsAt connects official clients to one address without touching the
// environment (several servers run at once).
func clientsAt(t *testing.T, addr string) (*bigtable.Client, *bigtable.AdminClient) {
	t.Helper()
	return testkit.Clients(t, addr, testProject, testInstance, "")
}

func dialT(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	return testkit.Dial(t, addr)
}

// metric reads one sample from the metrics page at httpAddr.
func metric(t *testing.T, httpAddr, name string) (float64, bool) {
	t.Helper()
	return testkit.Metric(t, httpAddr, name)
}

// TestJoinRefusesDataDirWithTables: --join on a data directory that holds
// tables (and never joined) is refused rather than replacing them.
func TestJoinRefusesDataDirWithTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := startServe(t, "serve", "--cluster-id", "a", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", t.TempDir())
	dir := t.TempDir()
	b := startServe(t, "serve", "--cluster-id", "b", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", dir)
	_, ab := clientsAt(t, b.addr)
	if err := ab.CreateTable(ctx, "mine"); err != nil {
		t.Fatal(err)
	}
	b.terminate(t)
	r := run(t, nil, ebbtableBin, "serve", "--cluster-id", "b", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", dir, "--join", a.addr)
	if r.code == 0 || !strings.Contains(r.stderr, "--join needs an empty data directory") {
		t.Fatalf("join over tables: exit %d\n%s", r.code, r.stderr)
	}
	// The tables are untouched.
	b = startServe(t, "serve", "--cluster-id", "b", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", dir)
	_, ab = clientsAt(t, b.addr)
	if tbls, err := ab.Tables(ctx); err != nil || len(tbls) != 1 || tbls[0] != "mine" {
		t.Fatalf("tables after the refused join: %v %v", tbls, err)
	}
	b.terminate(t)
	a.terminate(t)
}
