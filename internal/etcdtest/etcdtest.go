// Package etcdtest starts a one-member etcd on loopback for tests of the
// cluster mode: a real etcd (go.etcd.io/etcd/server/v3/embed) run as a
// process of its own (internal/etcdtest/etcdmain, built once per run of
// the suite like the ebbtable binary), so a test binary that uses it does
// not link etcd's server, raft and bbolt, nor run them under its race
// detector. Kept out of internal/testkit so a test binary that needs only
// etcd does not link the official client.
package etcdtest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/internal/testkit/testbin"
)

// timeout bounds the wait for etcd to start and to exit.
const timeout = 30 * time.Second

// Start runs a one-member etcd on 127.0.0.1 with its data in a test
// directory and returns its client endpoint; it stops when the test ends.
func Start(t testing.TB) string {
	t.Helper()
	ep, _ := StartStoppable(t)
	return ep
}

// StartStoppable is Start that also returns a stop, to cut the nodes of
// a test off from etcd before the test ends: the process exits (stop
// twice is fine).
func StartStoppable(t testing.TB) (endpoint string, stop func()) {
	t.Helper()
	ep, stop, _ := StartRestartable(t)
	return ep, stop
}

// StartRestartable is StartStoppable whose etcd can start again: stop
// ends its process (its clients' connections are refused, as when etcd
// is down), and restart runs it again on the same data and the same
// ports, returning once it is ready. The test's cleanup stops it.
func StartRestartable(t testing.TB) (endpoint string, stop, restart func()) {
	t.Helper()
	dir := t.TempDir()
	p, client, peer, err := run(dir, "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	cur := p
	stop = func() {
		mu.Lock()
		defer mu.Unlock()
		if cur != nil {
			cur.stop()
			cur = nil
		}
	}
	restart = func() {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if cur != nil {
			return
		}
		p, _, _, err := run(dir, client, peer)
		if err != nil {
			t.Fatalf("restart etcd on %s: %v", client, err)
		}
		cur = p
	}
	t.Cleanup(stop) // before the data directory goes (cleanups run last first)
	return client, stop, restart
}

// proc is a running etcdmain.
type proc struct {
	cmd    *exec.Cmd
	stdin  io.Closer
	exited chan struct{}
}

// stop closes the process's standard input, on which it closes etcd and
// exits, and waits for it to (it is killed if it does not in time).
func (p *proc) stop() {
	p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// run starts etcdmain on data directory dir, listening on client and
// peer (host:port; port 0: any free one), and returns it once etcd is
// ready, with the addresses it listens on. The process also ends when
// this one does: its standard input is a pipe from this process.
func run(dir, client, peer string) (p *proc, clientAddr, peerAddr string, err error) {
	bin, err := testbin.Build("github.com/ebbtable/ebbtable/internal/etcdtest/etcdmain", "etcdmain")
	if err != nil {
		return nil, "", "", err
	}
	cmd := exec.Command(bin, "--dir", dir, "--client", client, "--peer", peer)
	// etcd logs only what makes it give up, to the test binary's stderr
	// (the file itself: no goroutine copies it), as it did in-process.
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", "", err
	}
	p = &proc{cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		line, _ := r.ReadString('\n')
		lines <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, r)
		cmd.Wait()
		close(p.exited)
	}()
	select {
	case line := <-lines:
		if addrs := strings.Fields(line); len(addrs) == 2 {
			return p, addrs[0], addrs[1], nil
		}
		p.stop()
		return nil, "", "", fmt.Errorf("etcd did not start on %s (its errors are above)", client)
	case <-time.After(timeout):
		p.stdin.Close()
		cmd.Process.Kill()
		<-p.exited
		return nil, "", "", fmt.Errorf("etcd printed no addresses in %v", timeout)
	}
}
