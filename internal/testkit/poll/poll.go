// Package poll waits on what runs on the real clock: another process, a
// terminal, a peer, a disk. Work on the injected clock is driven by
// advancing the fake clock instead. It imports nothing but the standard
// library, so a package's tests that only need to wait do not link the
// rest of the test kit (the official clients, gRPC): testkit.Poll and
// testkit.Eventually are these functions.
package poll

import (
	"testing"
	"time"
)

// Until calls cond until it holds or timeout passes, and says whether it
// held.
func Until(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(wait)
		if wait < 50*time.Millisecond {
			wait *= 2
		}
	}
	return true
}

// Eventually polls cond until it holds, failing the test with what and the
// last detail cond gave once timeout has passed.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	var detail string
	if !Until(timeout, func() (ok bool) { ok, detail = cond(); return ok }) {
		t.Fatalf("%s: never happened in %v (last: %s)", what, timeout, detail)
	}
}
