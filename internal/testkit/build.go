// Package testkit holds what tests in several packages share: building the
// ebbtable binary that subprocess tests run, as users do, and running it
// (StartServe); polling (Poll, Eventually) for what runs on the real clock;
// throwaway TLS certificates; official clients dialled to a loopback
// address; a fixture table for what must survive crashes and restarts. Its
// sub-packages start the parts themselves: servertest (a real server
// in-process, or several joined as replicas) and enginetest (an engine on a
// temporary directory and a fake clock).
package testkit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// BuildEbbtable builds cmd/ebbtable and returns the binary's path and a
// cleanup for the caller to run when done (it keeps the binary).
//
// The binary lives at one path per source tree under the temporary
// directory, so the go command links it again only when its sources
// changed: the packages whose tests run it (cli, server/e2e, compat,
// robustness) share one build within a run of the suite and across runs.
// A file lock serializes the builds of test binaries running at once; a
// rebuild replaces the file, it does not rewrite one a process may be
// running. prefix names the caller in a build error. The go command's
// output goes to stderr.
func BuildEbbtable(prefix string) (bin string, cleanup func(), err error) {
	bin, err = Build("github.com/ebbtable/ebbtable/cmd/ebbtable", "ebbtable")
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", prefix, err)
	}
	return bin, func() {}, nil
}

// Build builds the main package pkg (of this module or a module it
// requires) as BuildEbbtable does, into a file called name, and returns
// its path.
func Build(pkg, name string) (bin string, err error) {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("locating the module: %w", err)
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(string(gomod))))
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("ebbtable-testbin-%d", os.Getuid()), hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("locking %s: %w", dir, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	bin = filepath.Join(dir, name)
	build := exec.Command("go", "build", "-o", bin, pkg)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building %s: %w", pkg, err)
	}
	return bin, nil
}
