// Package schedule owns the loop every periodic background job shares: a
// fixed cadence on the injected clock, exponential back-off after failures,
// and a stop that interrupts the running work and waits for it.
package schedule

import (
	"context"
	"log/slog"
	"time"

	"github.com/ebbtable/ebbtable/clock"
)

// Options configures a Loop.
type Options struct {
	// Name appears in log lines.
	Name string
	// Interval between the starts of two runs: a fixed cadence, however
	// long a run takes (a run longer than Interval is followed at once).
	Interval time.Duration
	// MaxBackoff caps the wait after failed runs (Interval doubled per
	// consecutive failure).
	MaxBackoff time.Duration
	Clock      clock.Clock
	Logger     *slog.Logger
	// OnFailure, if set, is called after each failed run (for a metric).
	OnFailure func()
	// Scheduled, if set, is called with the time of the next run each
	// time the loop settles it (the console and a metric show it).
	Scheduled func(next time.Time)
}

// Loop runs a function on a schedule until Stop.
type Loop struct {
	opts   Options
	run    func(context.Context) error
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs run every opts.Interval, the first time one interval from now.
func Start(opts Options, run func(context.Context) error) *Loop {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Loop{opts: opts, run: run, cancel: cancel, done: make(chan struct{})}
	go l.loop(ctx)
	return l
}

// Stop cancels the running work (the run's context) and waits for the loop
// to end. It is safe on a nil Loop.
func (l *Loop) Stop() {
	if l == nil {
		return
	}
	l.cancel()
	<-l.done
}

func (l *Loop) loop(ctx context.Context) {
	defer close(l.done)
	failures := 0
	wait := l.opts.Interval
	for {
		if l.opts.Scheduled != nil {
			l.opts.Scheduled(l.opts.Clock.Now().Add(wait))
		}
		select {
		case <-ctx.Done():
			return
		case <-l.opts.Clock.After(wait):
		}
		start := l.opts.Clock.Now()
		err := l.run(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failures++
			if l.opts.OnFailure != nil {
				l.opts.OnFailure()
			}
			wait = l.opts.Interval << min(failures, 10)
			if l.opts.MaxBackoff > 0 {
				wait = min(wait, l.opts.MaxBackoff)
			}
			l.opts.Logger.Error(l.opts.Name+" failed; backing off", "err", err, "retry_in", wait)
			continue
		}
		failures = 0
		wait = max(l.opts.Interval-l.opts.Clock.Now().Sub(start), 0)
	}
}
