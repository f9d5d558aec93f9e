//go:build linux && cgo

package hugepages

import (
	"os"
	"syscall"
)

// Reexec re-executes this process (same pid, arguments and environment)
// with Tunable in GLIBC_TUNABLES, unless it is set already: glibc reads
// its tunables only at start, so this must run before the process does
// anything else. If the re-exec fails, it returns and the process runs on
// without huge pages. A race build does not re-execute: the race detector
// replaces C malloc (the tunable would change nothing), and its start is
// slow enough (0.3–1 s more a start, measured) to slow the tests that
// restart servers.
func Reexec() {
	if raceBuild {
		return
	}
	reexec()
}

// reexec is Reexec in any build.
func reexec() {
	env, changed := TunedEnv(os.Environ())
	if !changed {
		return
	}
	// /proc/self/exe is the running image, even if its file was replaced
	// or deleted since the start.
	_ = syscall.Exec("/proc/self/exe", os.Args, env) // returns only on failure
}
