package testkit

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/internal/testkit/testbin"
)

// ProcessTimeout bounds every wait on a subprocess: its readiness line,
// its exit, a client command.
const ProcessTimeout = 30 * time.Second

// SyncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Serve is an `ebbtable serve` subprocess.
type Serve struct {
	Cmd *exec.Cmd
	// Addr is the gRPC address its readiness line gave.
	Addr   string
	Stderr *SyncBuffer
	// ExitedAt is when the process was reaped; read it after Exited.
	ExitedAt time.Time
	exited   chan struct{} // closed once the process is reaped

	mu    sync.Mutex
	lines []string // everything printed on stdout
}

// StartServe runs bin with args (a serve command line) in env and waits
// for its readiness line, "ebbtable running on ADDR", failing the test if
// it does not come within ProcessTimeout. The process is killed at cleanup
// if the test has not stopped it.
func StartServe(t testing.TB, bin string, env []string, args ...string) *Serve {
	t.Helper()
	p, ready, took := StartServeWithin(t, ProcessTimeout, bin, env, args...)
	switch {
	case ready:
		return p
	case took < ProcessTimeout:
		t.Fatalf("serve exited before it was ready (%v); stderr:\n%s", p.Cmd.ProcessState, p.Stderr.String())
	default:
		t.Fatalf("serve not ready after %v; stderr:\n%s", ProcessTimeout, p.Stderr.String())
	}
	return nil
}

// StartServeWithin runs bin with args in env and waits up to limit for its
// readiness line. It reports whether the server became ready and how long
// that (or its exit) took; a process not ready within limit is killed. The
// process is killed at cleanup if still running.
func StartServeWithin(t testing.TB, limit time.Duration, bin string, env []string, args ...string) (p *Serve, ready bool, took time.Duration) {
	t.Helper()
	p, ready, took, err := startServe(limit, bin, env, args)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.KillNow)
	return p, ready, took
}

// StartServeShared runs bin with args in env and waits up to
// ProcessTimeout for its readiness line, like StartServe, for a server
// that outlives the test that asked for it (one several tests share,
// started by the first and stopped by TestMain): no test's cleanup kills
// it, so the caller must (KillNow or Terminate's signal).
func StartServeShared(bin string, env []string, args ...string) (*Serve, error) {
	p, ready, took, err := startServe(ProcessTimeout, bin, env, args)
	switch {
	case err != nil:
		return nil, err
	case ready:
		return p, nil
	case took < ProcessTimeout:
		return nil, fmt.Errorf("serve exited before it was ready (%v); stderr:\n%s", p.Cmd.ProcessState, p.Stderr.String())
	default:
		return nil, fmt.Errorf("serve not ready after %v; stderr:\n%s", ProcessTimeout, p.Stderr.String())
	}
}

// startServe is StartServeWithin without a test: a process that prints a
// readiness line other than serve's is killed and reported as an error.
func startServe(limit time.Duration, bin string, env []string, args []string) (p *Serve, ready bool, took time.Duration, err error) {
	p = &Serve{Cmd: exec.Command(bin, testbin.ServeArgs(args)...), Stderr: &SyncBuffer{}, exited: make(chan struct{})}
	p.Cmd.Env = env
	p.Cmd.Stderr = p.Stderr
	stdout, err := p.Cmd.StdoutPipe()
	if err != nil {
		return nil, false, 0, err
	}
	start := time.Now()
	if err := p.Cmd.Start(); err != nil {
		return nil, false, 0, err
	}
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
		p.Cmd.Wait()
		p.ExitedAt = time.Now()
		close(p.exited)
	}()
	select {
	case line := <-first:
		addr, ok := strings.CutPrefix(line, "ebbtable running on ")
		if !ok {
			p.KillNow()
			return nil, false, 0, fmt.Errorf("serve printed %q, want \"ebbtable running on ADDR\"; stderr:\n%s", line, p.Stderr.String())
		}
		p.Addr = addr
		return p, true, time.Since(start), nil
	case <-p.exited:
		return p, false, time.Since(start), nil
	case <-time.After(limit):
		p.KillNow()
		return p, false, time.Since(start), nil
	}
}

// Exited is closed once the process has exited and been reaped.
func (p *Serve) Exited() <-chan struct{} { return p.exited }

// ExitedWithin says whether the process exits within d.
func (p *Serve) ExitedWithin(d time.Duration) bool {
	select {
	case <-p.exited:
		return true
	case <-time.After(d):
		return false
	}
}

// KillNow kills the process if it still runs and reaps it. A process stuck
// in a stalled fsync cannot die until the I/O completes, so callers lift
// any throttle first.
func (p *Serve) KillNow() {
	select {
	case <-p.exited:
	default:
		p.Cmd.Process.Kill()
		<-p.exited
	}
}

// Wait waits for the process to exit and returns its exit code.
func (p *Serve) Wait(t testing.TB) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(ProcessTimeout):
		t.Fatalf("serve did not exit within %v; stderr:\n%s", ProcessTimeout, p.Stderr.String())
	}
	return p.Cmd.ProcessState.ExitCode()
}

// Kill stops the server with SIGKILL, like a crash.
func (p *Serve) Kill(t testing.TB) {
	t.Helper()
	if err := p.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.Wait(t)
}

// Terminate stops the server with SIGTERM and returns its exit code.
func (p *Serve) Terminate(t testing.TB) int {
	t.Helper()
	code, err := p.Stop()
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// Stop is Terminate without a test (for a server TestMain stops): a
// process that does not exit within ProcessTimeout of SIGTERM is killed
// and reported.
func (p *Serve) Stop() (code int, err error) {
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, err
	}
	if !p.ExitedWithin(ProcessTimeout) {
		p.KillNow()
		return 0, fmt.Errorf("serve did not exit within %v of SIGTERM; stderr:\n%s", ProcessTimeout, p.Stderr.String())
	}
	return p.Cmd.ProcessState.ExitCode(), nil
}

// StdoutLines returns what the server printed on stdout so far.
func (p *Serve) StdoutLines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// CleanEnv is the test's environment without BIGTABLE_EMULATOR_HOST and
// EBBTABLE_*, with HOME at home and TZ=UTC (read prints local time, as cbt
// does), so a developer's shell cannot redirect a subprocess. extra comes
// last and wins.
func CleanEnv(home string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BIGTABLE_EMULATOR_HOST=") && !strings.HasPrefix(kv, "EBBTABLE_") &&
			!strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "TZ=") {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+home, "TZ=UTC")
	return append(env, extra...)
}
