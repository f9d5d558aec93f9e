package schedule

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// parked waits until the loop is waiting on the fake clock.
func parked(t *testing.T, c *clock.Fake) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.Waiters() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("loop never waited on the clock")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestCadenceAndBackoff(t *testing.T) {
	c := clock.NewFake(time.Unix(0, 0))
	var runs, failures atomic.Int32
	fail := atomic.Bool{}
	l := Start(Options{Name: "test", Interval: time.Minute, MaxBackoff: 3 * time.Minute, Clock: c, Logger: slog.New(slog.DiscardHandler),
		OnFailure: func() { failures.Add(1) }}, func(ctx context.Context) error {
		runs.Add(1)
		c.Advance(10 * time.Second) // a run that takes 10 s
		if fail.Load() {
			return errors.New("boom")
		}
		return nil
	})
	defer l.Stop()
	parked(t, c)
	c.Advance(time.Minute)
	parked(t, c)
	// Fixed cadence: the next run is due 50 s after the first one ended.
	c.Advance(49 * time.Second)
	if runs.Load() != 1 {
		t.Fatalf("runs %d before the cadence", runs.Load())
	}
	fail.Store(true)
	c.Advance(time.Second)
	parked(t, c)
	if runs.Load() != 2 || failures.Load() != 1 {
		t.Fatalf("runs %d failures %d", runs.Load(), failures.Load())
	}
	// After a failure it waits two intervals (backed off), not one.
	c.Advance(time.Minute)
	if runs.Load() != 2 {
		t.Fatal("retried without backing off")
	}
	c.Advance(time.Minute)
	parked(t, c)
	if runs.Load() != 3 {
		t.Fatalf("runs %d after the back-off", runs.Load())
	}
}

func TestStopInterruptsRun(t *testing.T) {
	c := clock.NewFake(time.Unix(0, 0))
	started := make(chan struct{})
	l := Start(Options{Interval: time.Second, Clock: c, Logger: slog.New(slog.DiscardHandler)}, func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	parked(t, c)
	c.Advance(time.Second)
	<-started
	l.Stop()
	var nilLoop *Loop
	nilLoop.Stop()
}
