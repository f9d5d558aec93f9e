package cli

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
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
	code := m.Run()
	if err := stopShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return code
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

// The server the tests of commands' output share (sharedServer): started
// by the first that asks, stopped by TestMain.
var (
	sharedOnce sync.Once
	sharedSrv  *testkit.Serve
	sharedErr  error
	sharedDir  string // its data directory
)

// sharedServer returns the address of the one `ebbtable serve` that the
// tests which check only commands (their output, flags and exit codes)
// share, and an instance for t's alone: tables and backups live per
// instance, so such tests see none of each other's and run in parallel.
// Each saves a serve start (about 0.1 CPU-s). A test of the server's own
// life (start, stop, crash, serve's flags, its data directory), or one
// that needs the default instance or a server-wide setting, starts its
// own (startServer).
func sharedServer(t *testing.T) (addr, instance string) {
	t.Helper()
	sharedOnce.Do(func() {
		sharedDir, sharedErr = os.MkdirTemp("", "ebbtable-cli-shared-")
		if sharedErr != nil {
			return
		}
		sharedSrv, sharedErr = testkit.StartServeShared(ebbtableBin, cleanEnv(),
			"serve", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", sharedDir)
	})
	if sharedErr != nil {
		t.Fatalf("the shared server: %v", sharedErr)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the shared server's stderr so far:\n%s", sharedSrv.Stderr.String())
		}
	})
	return sharedSrv.Addr, instanceFor(t)
}

// instanceFor is a new instance on the shared server for t: its name,
// lower case, and a number, as an instance ID (letters, digits and
// hyphens, at most 33). The number keeps a test run again in the same
// process (-count) out of its earlier run's instance.
func instanceFor(t *testing.T) string {
	id := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		}
		return '-'
	}, t.Name())
	if len(id) > 26 {
		id = id[:26]
	}
	return fmt.Sprintf("%s-%d", id, instances.Add(1))
}

// instances counts the instances instanceFor handed out.
var instances atomic.Int64

// stopShared stops the shared server, if a test started it, and reports
// it if it did not exit cleanly (a crash, or a failed stop) or was gone
// already.
func stopShared() error {
	if sharedDir != "" {
		defer os.RemoveAll(sharedDir)
	}
	if sharedSrv == nil {
		return nil
	}
	select {
	case <-sharedSrv.Exited():
		return fmt.Errorf("the shared server exited while the tests ran (%v); stderr:\n%s", sharedSrv.Cmd.ProcessState, sharedSrv.Stderr.String())
	default:
	}
	code, err := sharedSrv.Stop()
	if err != nil {
		return fmt.Errorf("the shared server: %v", err)
	}
	if code != 0 {
		return fmt.Errorf("the shared server exited %d after SIGTERM; stderr:\n%s", code, sharedSrv.Stderr.String())
	}
	return nil
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
