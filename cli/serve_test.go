package cli

import (
	"reflect"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
)

const (
	testProject  = "proj"
	testInstance = "inst"
)

// officialClients connects the official Go clients to addr (as
// BIGTABLE_EMULATOR_HOST would, without setting it, so the tests using
// them can run in parallel).
func officialClients(t *testing.T, addr string) (*bigtable.Client, *bigtable.AdminClient) {
	t.Helper()
	return testkit.Clients(t, addr, testProject, testInstance, "")
}

// baseTS is a millisecond-granular timestamp for explicit writes.
var baseTS = testkit.BaseTS

func msAfter(ts bigtable.Timestamp, ms int) bigtable.Timestamp { return testkit.MsAfter(ts, ms) }

// TestGracefulStop stops the server with SIGTERM: it exits 0, printed only
// its readiness line, logged the shutdown, and the data is there after a
// restart.
func TestGracefulStop(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServer(t, dir)
	client, admin := officialClients(t, srv.addr)
	want := testkit.WriteFixture(t, client, admin)
	before := testkit.ReadFixture(t, client)
	testkit.CheckFixture(t, before, want)

	if code := srv.terminate(t); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM, want 0; stderr:\n%s", code, srv.stderr.String())
	}
	if lines := srv.stdoutLines(); len(lines) != 1 {
		t.Errorf("serve printed %q on stdout, want only the readiness line", lines)
	}
	if log := srv.stderr.String(); !strings.Contains(log, "shutting down") || !strings.Contains(log, "stopped") {
		t.Errorf("serve log lacks the shutdown:\n%s", log)
	}

	srv = startServer(t, dir)
	client, admin = officialClients(t, srv.addr)
	testkit.CheckFixtureSchema(t, admin)
	if after := testkit.ReadFixture(t, client); !reflect.DeepEqual(after, before) {
		t.Errorf("read after restart differs:\n got %v\nwant %v", after, before)
	}
}
