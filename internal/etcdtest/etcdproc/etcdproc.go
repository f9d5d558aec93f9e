// Package etcdproc starts the one-member etcd of internal/etcdtest as a
// process (internal/etcdtest/etcdmain, built once like the ebbtable
// binary), for the tests that drive ebbtable processes against etcd
// (cli, compat, console, robustness). A test binary that starts etcd
// in-process links etcd's server, raft and bbolt: about a CPU-second more
// of link on every run of the suite, for each such package.
package etcdproc

import (
	"bufio"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/internal/testkit"
)

// Start runs etcd with its data in a test directory and returns its
// client endpoint (host:port); the process ends when the test ends, or
// with the test process, whose pipe to its standard input then closes.
func Start(t testing.TB) string {
	t.Helper()
	bin, err := testkit.Build("github.com/ebbtable/ebbtable/internal/etcdtest/etcdmain", "etcdmain")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--dir", t.TempDir())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testkit.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() { // before the data directory goes (cleanups run last first)
		stdin.Close()
		select {
		case <-exited:
		case <-time.After(testkit.ProcessTimeout):
			cmd.Process.Kill()
			<-exited
		}
	})
	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		line, _ := r.ReadString('\n')
		lines <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, r)
		cmd.Wait()
		close(exited)
	}()
	select {
	case ep := <-lines:
		if ep == "" {
			<-exited
			t.Fatalf("etcd did not start:\n%s", stderr.String())
		}
		return ep
	case <-time.After(testkit.ProcessTimeout):
		t.Fatalf("etcd printed no endpoint in %v:\n%s", testkit.ProcessTimeout, stderr.String())
		return ""
	}
}
