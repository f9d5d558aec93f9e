package cli

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/ebbtable/ebbtable/internal/testkit"
)

// ebbtableBin is the binary TestMain builds; the tests run it as a
// subprocess, as users do.
var ebbtableBin string

// processTimeout bounds every wait on a subprocess: its readiness line,
// its exit, a client command.
const processTimeout = testkit.ProcessTimeout

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	bin, cleanup, err := testkit.BuildEbbtable("ebbtable-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	ebbtableBin = bin
	home, err := os.MkdirTemp("", "ebbtable-cli-home-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(home)
	emptyHome = home
	return m.Run()
}

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer = testkit.SyncBuffer

// serverProc is an `ebbtable serve` subprocess (testkit.Serve, under the
// names these tests use).
type serverProc struct {
	*testkit.Serve
	cmd    *exec.Cmd
	addr   string
	stderr *syncBuffer
}

// startServer runs `ebbtable serve` on a free loopback port with metrics off
// and waits for its readiness line.
func startServer(t *testing.T, dataDir string) *serverProc {
	t.Helper()
	return startServe(t, "serve", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", dataDir)
}

// startServe runs the binary with args (a serve command line) and waits for
// its readiness line. The process is killed at cleanup if the test has not
// stopped it.
func startServe(t *testing.T, args ...string) *serverProc {
	t.Helper()
	p := testkit.StartServe(t, ebbtableBin, cleanEnv(), args...)
	return &serverProc{Serve: p, cmd: p.Cmd, addr: p.Addr, stderr: p.Stderr}
}

func (p *serverProc) wait(t *testing.T) int      { t.Helper(); return p.Wait(t) }
func (p *serverProc) kill(t *testing.T)          { t.Helper(); p.Kill(t) }
func (p *serverProc) terminate(t *testing.T) int { t.Helper(); return p.Terminate(t) }
func (p *serverProc) stdoutLines() []string      { return p.StdoutLines() }

// emptyHome is a HOME without a .cbtrc, so a developer's ~/.cbtrc cannot
// redirect the subprocesses; TestMain makes it.
var emptyHome string

// cleanEnv is testkit.CleanEnv with HOME at emptyHome.
func cleanEnv(extra ...string) []string { return testkit.CleanEnv(emptyHome, extra...) }

// result is a finished command.
type result struct {
	stdout, stderr string
	code           int
}

// run runs name with args and the extra environment, and returns its output
// and exit code.
func run(t *testing.T, env []string, name string, args ...string) result {
	t.Helper()
	r := testkit.Run(t, cleanEnv(env...), name, args...)
	return result{r.Stdout, r.Stderr, r.Code}
}

// ebbtable runs the ebbtable binary.
func ebbtable(t *testing.T, args ...string) result {
	t.Helper()
	return run(t, nil, ebbtableBin, args...)
}

// mustSucceed fails the test unless r exited 0.
func (r result) mustSucceed(t *testing.T, what string) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("%s: exit code %d\nstdout:\n%s\nstderr:\n%s", what, r.code, r.stdout, r.stderr)
	}
	return r
}
