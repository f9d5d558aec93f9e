package collector

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a collector loop or Pebble goroutine
// outlives its test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
