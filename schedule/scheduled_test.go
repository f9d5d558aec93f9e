package schedule

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/clock"
)

// TestScheduledReportsNextRun: the loop reports each next run's time when
// it settles it: one interval after start, then one interval after the
// previous run started (a fixed cadence).
func TestScheduledReportsNextRun(t *testing.T) {
	c := clock.NewFake(time.Unix(0, 0))
	var mu sync.Mutex
	var got []time.Time
	l := Start(Options{Interval: time.Minute, Clock: c, Logger: slog.New(slog.DiscardHandler),
		Scheduled: func(next time.Time) { mu.Lock(); got = append(got, next); mu.Unlock() }},
		func(ctx context.Context) error {
			c.Advance(10 * time.Second) // a run that takes 10 s
			return nil
		})
	defer l.Stop()
	parked(t, c)
	c.Advance(time.Minute)
	parked(t, c)
	mu.Lock()
	defer mu.Unlock()
	want := []time.Time{time.Unix(60, 0), time.Unix(120, 0)}
	if len(got) != 2 || !got[0].Equal(want[0]) || !got[1].Equal(want[1]) {
		t.Fatalf("scheduled %v, want %v", got, want)
	}
}
