// Package enginetest opens a real engine (table on Pebble) for tests of
// the packages above it: on a temporary directory and a fake clock unless
// told otherwise, closed at the test's cleanup.
package enginetest

import (
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/table"
)

// T0 is where the fake clock starts: a fixed instant, so figures that
// depend on the date repeat from run to run.
var T0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Open opens an engine with o. An empty o.Dir is a fresh temporary
// directory; a nil o.Clock is a fake clock at T0, which Open returns (nil
// when o named a clock). The engine is closed at the test's cleanup, after
// whatever the test registers later (jobs stop before their engine
// closes); closing it earlier is harmless.
func Open(t testing.TB, o table.Options) (*table.Engine, *clock.Fake) {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	var fake *clock.Fake
	if o.Clock == nil {
		fake = clock.NewFake(T0)
		o.Clock = fake
	}
	eng, err := table.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return eng, fake
}
