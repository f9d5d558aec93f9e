package table_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives Engine.Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
