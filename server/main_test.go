package server

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives its test: every
// server, client, collector loop and Pebble goroutine must be stopped by
// Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
