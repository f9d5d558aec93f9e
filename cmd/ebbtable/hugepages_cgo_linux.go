//go:build linux && cgo

package main

import (
	"os"
	"syscall"
)

// withHugePages re-executes this process (same pid, arguments and
// environment) with hugePagesTunable in GLIBC_TUNABLES when args run
// serve and the tunable is not set yet: glibc reads its tunables only at
// start. If the re-exec fails, serve runs without huge pages.
func withHugePages(args []string) {
	if len(args) == 0 || args[0] != "serve" {
		return
	}
	env, changed := tunedEnv(os.Environ())
	if !changed {
		return
	}
	// /proc/self/exe is the running image, even if its file was replaced
	// or deleted since the start.
	_ = syscall.Exec("/proc/self/exe", os.Args, env) // returns only on failure
}
