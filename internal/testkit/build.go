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
	"fmt"

	"github.com/ebbtable/ebbtable/internal/testkit/testbin"
)

// BuildEbbtable builds cmd/ebbtable (testbin.Build) and returns the
// binary's path and a cleanup for the caller to run when done (it keeps
// the binary). prefix names the caller in a build error.
func BuildEbbtable(prefix string) (bin string, cleanup func(), err error) {
	bin, err = Build("github.com/ebbtable/ebbtable/cmd/ebbtable", "ebbtable")
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", prefix, err)
	}
	return bin, func() {}, nil
}

// Build builds the main package pkg into a file called name and returns
// its path: testbin.Build.
func Build(pkg, name string) (bin string, err error) { return testbin.Build(pkg, name) }
