//go:build unix

package robustness

// Helpers for the crash and fault tests that start `ebbtable serve` with
// their own flags and drive it with the official clients and the command
// line (killnine_test.go, diskfault_test.go, bounds_test.go,
// threeclusters_test.go): testkit's serve harness and command runner under
// short names.

import (
	"os/exec"
	"testing"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
)

const (
	testProject  = "proj"
	testInstance = "inst"
)

// processTimeout bounds every wait on a subprocess.
const processTimeout = testkit.ProcessTimeout

// baseTS is a millisecond-granular timestamp for explicit writes.
var baseTS = testkit.BaseTS

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer = testkit.SyncBuffer

// serverProc is an `ebbtable serve` subprocess.
type serverProc struct {
	*testkit.Serve
	cmd    *exec.Cmd
	addr   string
	stderr *syncBuffer
}

// startServer runs `ebbtable serve` on dataDir, a free loopback port and
// metrics off, and waits for its readiness line.
func startServer(t *testing.T, dataDir string) *serverProc {
	t.Helper()
	return startServe(t, "serve", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", dataDir)
}

// startServe runs the binary with args (a serve command line) and waits for
// its readiness line; it is killed at cleanup if the test has not stopped it.
func startServe(t *testing.T, args ...string) *serverProc {
	t.Helper()
	p := testkit.StartServe(t, ebbtableBin, cleanHome(), args...)
	return &serverProc{Serve: p, cmd: p.Cmd, addr: p.Addr, stderr: p.Stderr}
}

func (p *serverProc) kill(t *testing.T)          { t.Helper(); p.Kill(t) }
func (p *serverProc) terminate(t *testing.T) int { t.Helper(); return p.Terminate(t) }

// cleanHome is testkit.CleanEnv with HOME at the empty home.
func cleanHome(extra ...string) []string { return testkit.CleanEnv(home, extra...) }

// result is a finished command.
type result = testkit.Result

// run runs name with args and the extra environment.
func run(t *testing.T, env []string, name string, args ...string) result {
	t.Helper()
	return testkit.Run(t, cleanHome(env...), name, args...)
}

// ebbtable runs the ebbtable binary.
func ebbtable(t *testing.T, args ...string) result {
	t.Helper()
	return run(t, nil, ebbtableBin, args...)
}

// officialClients connects the official Go clients to addr.
func officialClients(t *testing.T, addr string) (*bigtable.Client, *bigtable.AdminClient) {
	t.Helper()
	return testkit.Clients(t, addr, testProject, testInstance, "")
}
