//go:build !unix

package cli

import "os"

// profileSignals: none on this platform (one profile per run).
func profileSignals() []os.Signal { return nil }
