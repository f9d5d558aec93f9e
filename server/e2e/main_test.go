// Package e2e holds end-to-end tests of the server's behaviour as a client
// sees it: through the official Bigtable clients against real servers,
// started in-process by internal/testkit/servertest (alone, or several
// joined as replicas), or as `ebbtable serve` subprocesses where only a
// real process shows the behaviour (a SIGKILL, the data directory's size
// after `gc run`). Tests of the command line itself (flags, output, exit
// codes) live in package cli; crash and fault campaigns in robustness.
package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/ebbtable/ebbtable/internal/testkit"
)

// ebbtableBin is the binary TestMain builds, once, for subprocess tests.
var ebbtableBin string

// home is an empty HOME for subprocesses.
var home string

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	bin, cleanup, err := testkit.BuildEbbtable("ebbtable-e2e-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	ebbtableBin = bin
	if home, err = os.MkdirTemp("", "ebbtable-e2e-home-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(home)
	return m.Run()
}
