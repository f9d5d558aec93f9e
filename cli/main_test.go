package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/internal/testkit"
)

// ebbtableBin is the binary TestMain builds; the tests run it as a
// subprocess, as users do.
var ebbtableBin string

// processTimeout bounds every wait on a subprocess: its readiness line,
// its exit, a client command.
const processTimeout = 30 * time.Second

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
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// serverProc is an `ebbtable serve` subprocess.
type serverProc struct {
	cmd    *exec.Cmd
	addr   string
	stderr syncBuffer
	exited chan struct{} // closed once the process is reaped

	mu    sync.Mutex
	lines []string // everything printed on stdout
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
	p := &serverProc{cmd: exec.Command(ebbtableBin, args...), exited: make(chan struct{})}
	p.cmd.Env = cleanEnv()
	p.cmd.Stderr = &p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
	})
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			if len(p.lines) == 1 {
				first <- sc.Text()
			}
			p.mu.Unlock()
		}
		// Wait only after stdout is drained, as os/exec requires.
		p.cmd.Wait()
		close(p.exited)
	}()
	select {
	case line := <-first:
		addr, ok := strings.CutPrefix(line, "ebbtable running on ")
		if !ok {
			t.Fatalf("serve printed %q, want \"ebbtable running on ADDR\"; stderr:\n%s", line, p.stderr.String())
		}
		p.addr = addr
	case <-p.exited:
		t.Fatalf("serve exited before it was ready (%v); stderr:\n%s", p.cmd.ProcessState, p.stderr.String())
	case <-time.After(processTimeout):
		t.Fatalf("serve not ready after %v; stderr:\n%s", processTimeout, p.stderr.String())
	}
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *serverProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(processTimeout):
		t.Fatalf("serve did not exit within %v; stderr:\n%s", processTimeout, p.stderr.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// kill stops the server with SIGKILL, like a crash.
func (p *serverProc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.wait(t)
}

// terminate stops the server with SIGTERM and returns its exit code.
func (p *serverProc) terminate(t *testing.T) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	return p.wait(t)
}

// stdoutLines returns what the server printed on stdout so far.
func (p *serverProc) stdoutLines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// emptyHome is a HOME without a .cbtrc, so a developer's ~/.cbtrc cannot
// redirect the subprocesses; TestMain makes it.
var emptyHome string

// cleanEnv is the test's environment without BIGTABLE_EMULATOR_HOST and
// EBBTABLE_*, with HOME at emptyHome and TZ=UTC (read prints local time, as
// cbt does), so a developer's shell cannot redirect the subprocesses. extra
// comes last and wins.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BIGTABLE_EMULATOR_HOST=") && !strings.HasPrefix(kv, "EBBTABLE_") &&
			!strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "TZ=") {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+emptyHome, "TZ=UTC")
	return append(env, extra...)
}

// result is a finished command.
type result struct {
	stdout, stderr string
	code           int
}

// run runs name with args and the extra environment, and returns its output
// and exit code.
func run(t *testing.T, env []string, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), processTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = cleanEnv(env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s %q: %v", name, args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("%s %q: timed out after %v; stderr:\n%s", name, args, processTimeout, stderr.String())
	}
	return result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
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
