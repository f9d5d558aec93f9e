package e2e

import (
	"reflect"
	"testing"

	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/internal/testkit/servertest"
)

// serve runs `ebbtable serve` on dir as a subprocess, for what only a real
// process shows: a SIGKILL.
func serve(t *testing.T, dir string) *testkit.Serve {
	t.Helper()
	return testkit.StartServe(t, ebbtableBin, testkit.CleanEnv(home),
		"serve", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", dir)
}

// TestPersistenceAfterKill writes through the official clients, kills the
// server with SIGKILL right after the last acknowledged write, restarts it on
// the same data directory and reads everything back.
func TestPersistenceAfterKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := serve(t, dir)
	client, admin := testkit.Clients(t, srv.Addr, servertest.Project, servertest.Instance, "")
	want := testkit.WriteFixture(t, client, admin)
	srv.Kill(t)
	client.Close()
	admin.Close()

	srv = serve(t, dir)
	client, admin = testkit.Clients(t, srv.Addr, servertest.Project, servertest.Instance, "")
	testkit.CheckFixtureSchema(t, admin)
	after := testkit.ReadFixture(t, client)
	testkit.CheckFixture(t, after, want)

	// A second crash and restart changes nothing.
	srv.Kill(t)
	srv = serve(t, dir)
	client, _ = testkit.Clients(t, srv.Addr, servertest.Project, servertest.Instance, "")
	if again := testkit.ReadFixture(t, client); !reflect.DeepEqual(again, after) {
		t.Errorf("second restart read differs:\n got %v\nwant %v", again, after)
	}
}

// TestRestartKeepsData closes an in-process server and starts it again on
// the same directory: schema and data are all there, and a second restart
// changes nothing.
func TestRestartKeepsData(t *testing.T) {
	t.Parallel()
	env := servertest.Start(t)
	want := testkit.WriteFixture(t, env.Client, env.Admin)
	env.Restart()
	testkit.CheckFixtureSchema(t, env.Admin)
	after := testkit.ReadFixture(t, env.Client)
	testkit.CheckFixture(t, after, want)
	env.Restart()
	if again := testkit.ReadFixture(t, env.Client); !reflect.DeepEqual(again, after) {
		t.Errorf("second restart read differs:\n got %v\nwant %v", again, after)
	}
}
