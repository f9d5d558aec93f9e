//go:build unix

package robustness

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/internal/testkit/testbin"
)

// ebbtableBin is the binary TestMain builds; the tests run it as a
// subprocess, as users do.
var ebbtableBin string

// home is an empty HOME for the subprocesses of the tests that run
// commands (a developer's ~/.cbtrc cannot redirect them); TestMain makes it.
var home string

// startTimeout bounds the wait for a server's readiness line.
const startTimeout = 30 * time.Second

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	bin, cleanup, err := testkit.BuildEbbtable("ebbtable-robustness-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	ebbtableBin = bin
	if home, err = os.MkdirTemp("", "ebbtable-robustness-home-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(home)
	return m.Run()
}

// tailBuffer keeps the last max bytes written to it; safe for concurrent use.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// proc is one run of `ebbtable serve`.
type proc struct {
	cmd    *exec.Cmd
	addr   string
	exited chan struct{} // closed once the process is reaped
	killed bool          // set by the nemesis before it sends SIGKILL
}

// server is an `ebbtable serve` that the nemesis kills, restarts, pauses and
// resumes. Every run uses the same data directory and, after the first, the
// same port, so clients reconnect to the address they already have.
type server struct {
	dataDir string
	stderr  *tailBuffer // the last runs' stderr, for failure messages

	mu   sync.Mutex
	cur  *proc
	addr string // fixed after the first start
	// unexpected is closed when a run exits without the nemesis killing it.
	unexpected chan struct{}
	exitErr    error
}

func newServer(dataDir string) *server {
	return &server{dataDir: dataDir, stderr: &tailBuffer{max: 16 << 10}, unexpected: make(chan struct{})}
}

// start runs the server and waits until it prints its readiness line. The
// first start takes a free port; later starts reuse it, retrying while the
// old socket is still being released.
func (s *server) start() error {
	s.mu.Lock()
	addr := s.addr
	s.mu.Unlock()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var err error
	deadline := time.Now().Add(startTimeout)
	for {
		err = s.startOnce(addr)
		if err == nil || time.Now().After(deadline) || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *server) startOnce(addr string) error {
	p := &proc{exited: make(chan struct{})}
	p.cmd = exec.Command(ebbtableBin, testbin.ServeArgs([]string{"serve", "--addr", addr, "--http-addr", "off", "--data", s.dataDir})...)
	p.cmd.Env = cleanEnv()
	runErr := &tailBuffer{max: 4 << 10}
	p.cmd.Stderr = io.MultiWriter(s.stderr, runErr)
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := p.cmd.Start(); err != nil {
		return err
	}
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for n := 0; sc.Scan(); n++ {
			if n == 0 {
				first <- sc.Text()
			}
		}
		// Wait only after stdout is drained, as os/exec requires.
		p.cmd.Wait()
		close(p.exited)
		s.mu.Lock()
		defer s.mu.Unlock()
		if !p.killed && s.cur == p && s.exitErr == nil {
			s.exitErr = fmt.Errorf("ebbtable serve exited by itself (%v); stderr:\n%s", p.cmd.ProcessState, runErr.String())
			close(s.unexpected)
		}
	}()
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case line := <-first:
		got, ok := strings.CutPrefix(line, "ebbtable running on ")
		if !ok {
			p.cmd.Process.Kill()
			<-p.exited
			return fmt.Errorf("serve printed %q, want \"ebbtable running on ADDR\"; stderr:\n%s", line, runErr.String())
		}
		p.addr = got
	case <-p.exited:
		return fmt.Errorf("serve exited before it was ready (%v); stderr:\n%s", p.cmd.ProcessState, runErr.String())
	case <-timer.C:
		p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("serve not ready after %v; stderr:\n%s", startTimeout, runErr.String())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.addr == "" {
		s.addr = p.addr
	} else if p.addr != s.addr {
		p.killed = true
		p.cmd.Process.Kill()
		return fmt.Errorf("restarted server listens on %s, want %s", p.addr, s.addr)
	}
	s.cur = p
	return nil
}

// kill sends SIGKILL, as a crash would, and waits for the process to go.
func (s *server) kill() error {
	p := s.current()
	if p == nil {
		return errors.New("no server running")
	}
	s.mu.Lock()
	p.killed = true
	s.mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(startTimeout):
		return errors.New("server did not exit after SIGKILL")
	}
}

// signal sends sig (SIGSTOP or SIGCONT) to the running server.
func (s *server) signal(sig syscall.Signal) error {
	p := s.current()
	if p == nil {
		return errors.New("no server running")
	}
	return p.cmd.Process.Signal(sig)
}

func (s *server) current() *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// stop kills whatever is running, for cleanup.
func (s *server) stop() {
	if p := s.current(); p != nil {
		select {
		case <-p.exited:
		default:
			s.kill()
		}
	}
}

// failure reports why the server exited by itself, or nil.
func (s *server) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exitErr
}

// cleanEnv is the test's environment without BIGTABLE_EMULATOR_HOST, so a
// developer's shell cannot redirect the subprocesses.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BIGTABLE_EMULATOR_HOST=") {
			env = append(env, kv)
		}
	}
	return env
}
