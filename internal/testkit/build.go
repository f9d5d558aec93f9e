// Package testkit holds what tests in several packages share: building the
// ebbtable binary that subprocess tests run, as users do (once per test
// binary), polling (Poll, Eventually) for what runs on the real clock,
// throwaway TLS certificates, and official clients dialled to a loopback
// address. Its sub-packages start the parts themselves: servertest (a
// real server in-process, or several joined as replicas) and enginetest
// (an engine on a temporary directory and a fake clock).
package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildEbbtable builds cmd/ebbtable into a fresh temporary directory named
// after prefix and returns the binary's path and a cleanup that removes it.
// The go command's output goes to stderr.
func BuildEbbtable(prefix string) (bin string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	bin = filepath.Join(dir, "ebbtable")
	build := exec.Command("go", "build", "-o", bin, "github.com/ebbtable/ebbtable/cmd/ebbtable")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("building ebbtable: %w", err)
	}
	return bin, cleanup, nil
}
