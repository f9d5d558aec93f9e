//go:build !unix

package bench

import (
	"errors"
	"os"
)

// nextProfile needs SIGUSR1, which this platform lacks.
func nextProfile(*os.Process) error {
	return errors.New("bench: per-workload server profiles need SIGUSR1 (Unix)")
}
