package testkit

import (
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/internal/testkit/poll"
)

// Poll calls cond until it holds or timeout passes, and says whether it
// held (poll.Until). It is for waiting on what runs on the real clock:
// another process, a terminal, a peer, a disk. Work on the injected clock
// is driven by advancing the fake clock instead.
func Poll(timeout time.Duration, cond func() bool) bool { return poll.Until(timeout, cond) }

// Eventually polls cond until it holds, failing the test with what and the
// last detail cond gave once timeout has passed (poll.Eventually). Tests
// that need nothing else of the kit import package poll instead, and link
// less.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	poll.Eventually(t, what, timeout, cond)
}
