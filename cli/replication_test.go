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

// TestJoinRefusedExitCode: `serve --join` on a data directory that holds
// tables exits non-zero with the reason on stderr (what the server does,
// and that the tables stay, is server/e2e's TestJoinRefusesDataDirWithTables).
// The refusal comes before the seed is dialled, so no seed runs.
func TestJoinRefusedExitCode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	b := startServe(t, "serve", "--cluster-id", "b", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", dir)
	_, ab := clientsAt(t, b.addr)
	if err := ab.CreateTable(ctx, "mine"); err != nil {
		t.Fatal(err)
	}
	b.terminate(t)
	r := run(t, nil, ebbtableBin, "serve", "--cluster-id", "b", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", dir, "--join", freeAddr(t))
	if r.code != 1 || !strings.Contains(r.stderr, "--join needs an empty data directory") {
		t.Fatalf("join over tables: exit %d\n%s", r.code, r.stderr)
	}
}
