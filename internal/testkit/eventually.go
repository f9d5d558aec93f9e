package testkit

import (
	"testing"
	"time"
)

// Eventually polls cond until it holds, failing the test with what and the
// last detail cond gave once timeout has passed. It is for waiting on what
// runs on the real clock: another process, a peer, a disk. Work on the
// injected clock is driven by advancing the fake clock instead.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never happened in %v (last: %s)", what, timeout, detail)
		}
		time.Sleep(wait)
		if wait < 50*time.Millisecond {
			wait *= 2
		}
	}
}
