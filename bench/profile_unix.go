//go:build unix

package bench

import (
	"os"
	"syscall"
)

// nextProfile asks an ebbtable server started with --cpuprofile FILE to
// close its current CPU profile and start the next (FILE.1, FILE.2, …).
func nextProfile(p *os.Process) error { return p.Signal(syscall.SIGUSR1) }
