//go:build unix

package cli

import (
	"os"
	"syscall"
)

// profileSignals start serve --cpuprofile's next profile.
func profileSignals() []os.Signal { return []os.Signal{syscall.SIGUSR1} }
