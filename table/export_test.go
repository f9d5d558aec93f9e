package table

import (
	"math"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// WithFS returns opts with Pebble running on fs instead of the OS
// filesystem: fault tests open the engine on vfs.NewCrashableMem or an
// errorfs wrapper.
func WithFS(opts Options, fs vfs.FS) Options {
	opts.fs = fs
	return opts
}

// SetSkipSteps sets how many keys a scan steps over before it seeks past
// the rest of a column (0: it always seeks), returning the old count.
func SetSkipSteps(n int) int { return int(skipSteps.Swap(int32(n))) }

// HoldNewCellLookups fixes whether e's writes look up that their cells are
// new (newCellLookups: on, as while point reads come, or off), for
// benchmarks that compare the two in one run.
func HoldNewCellLookups(e *Engine, on bool) {
	e.lookups.end.Store(math.MaxInt64)
	e.lookups.off.Store(!on)
}
