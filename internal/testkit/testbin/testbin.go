// Package testbin builds the main packages that tests run as processes
// (the ebbtable binary, etcd's, an example's) once per source tree and
// run of the suite. It is apart from internal/testkit so a test binary
// that only starts such a process (clusteretcd's, through
// internal/etcdtest) does not link the official client with testkit.
// ServeArgs, the serve command line those processes get, is here for the
// same reason: its test would otherwise link a test binary of testkit.
package testbin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// Build builds the main package pkg (of this module or a module it
// requires) into a file called name, and returns its path.
//
// The binary lives at one path per source tree under the temporary
// directory, so the go command links it again only when its sources
// changed: the packages whose tests run it share one build within a run
// of the suite and across runs. A file lock serializes the builds of
// test binaries running at once; a rebuild replaces the file, it does not
// rewrite one a process may be running. The go command's output goes to
// stderr.
//
// Asking the go command whether a binary is up to date costs half a
// CPU-second (it loads and hashes some 300 packages), so Build asks once
// per run of the suite: a stamp next to the binary names the go command
// that ran the test binary which built it (its pid and start time, from
// /proc), and a test binary run by the same go command uses the binary
// as it is. Another run, a test binary run by hand or through go test
// -exec, or a system without /proc asks the go command again.
func Build(pkg, name string) (bin string, err error) {
	builtMu.Lock()
	defer builtMu.Unlock()
	if bin, ok := built[pkg+" "+name]; ok {
		return bin, nil
	}
	bin, err = build(pkg, name)
	if err == nil {
		built[pkg+" "+name] = bin
	}
	return bin, err
}

var (
	builtMu sync.Mutex
	built   = map[string]string{} // pkg and name -> path, built by this process
)

// runStamp names the go command that started this test binary: its pid
// and start time, so a pid reused later does not match. It is "" when the
// parent is not the go command (a test binary run by hand from a shell,
// which may run it again after a source change, or through go test -exec)
// or where /proc cannot tell.
func runStamp() string {
	ppid := os.Getppid()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", ppid))
	if err != nil {
		return ""
	}
	// pid (comm) state ...: the command name is in parentheses and may
	// hold spaces; after it, state is field 3 and the start time field 22.
	open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || end < open || string(stat[open+1:end]) != "go" {
		return ""
	}
	fields := strings.Fields(string(stat[end+1:]))
	if len(fields) < 20 {
		return ""
	}
	return fmt.Sprintf("%d %s", ppid, fields[19])
}

func build(pkg, name string) (bin string, err error) {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("locating the module: %w", err)
	}
	modPath := strings.TrimSpace(string(gomod))
	sum := sha256.Sum256([]byte(modPath))
	root := filepath.Join(os.TempDir(), fmt.Sprintf("ebbtable-testbin-%d", os.Getuid()))
	dir := filepath.Join(root, hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "gomod"), []byte(modPath), 0o600); err != nil {
		return "", err
	}
	forgetGone(root, dir)
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
	stampFile := bin + ".run"
	stamp := runStamp()
	if stamp != "" {
		if b, err := os.ReadFile(stampFile); err == nil && string(b) == pkg+" "+stamp {
			if _, err := os.Stat(bin); err == nil {
				return bin, nil // built in this run of the suite
			}
		}
	}
	os.Remove(stampFile)
	build := exec.Command("go", "build", "-o", bin, pkg)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building %s: %w", pkg, err)
	}
	if stamp != "" {
		if err := os.WriteFile(stampFile, []byte(pkg+" "+stamp), 0o600); err != nil {
			return "", err
		}
	}
	return bin, nil
}

// forgetGone removes the binaries built for source trees that no longer
// exist: each directory under root names its tree's go.mod in a file
// "gomod", and one whose go.mod is gone (a removed clone or worktree) is
// deleted, unless a build holds its lock. Without this every clone that
// ever ran the suite kept its binaries (some 160 MB each) for good.
// Directories without the file are left alone.
func forgetGone(root, self string) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range ents {
		d := filepath.Join(root, e.Name())
		if !e.IsDir() || d == self {
			continue
		}
		mod, err := os.ReadFile(filepath.Join(d, "gomod"))
		if err != nil || len(mod) == 0 {
			continue
		}
		if _, err := os.Stat(string(mod)); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		lock, err := os.OpenFile(filepath.Join(d, "lock"), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			os.RemoveAll(d)
		}
		lock.Close()
	}
}
