package server

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives its test: every
// server, client, collector loop and Pebble goroutine must be stopped by
// Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// In emulator mode the official client dials BIGTABLE_EMULATOR_HOST
		// itself and never closes that connection; its resolver/balancer
		// serializers are the client library's, not the server's.
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
	)
}
