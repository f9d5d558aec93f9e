// Package clock owns the notion of time every background job and read path
// uses: a Clock interface with the real clock and a fake one tests move by hand.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time and makes timers. Everything that depends on time takes
// one, so tests can run GC and TTL in milliseconds.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has elapsed on this clock.
	After(d time.Duration) <-chan time.Time
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// After wraps time.After.
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Fake is a clock that moves only when told to. The zero value is not usable;
// call NewFake.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// NewFake returns a fake clock set to t.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// After fires once Advance or Set has moved the clock d past the current time.
func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	at := f.now.Add(d)
	if d <= 0 {
		ch <- f.now
		return ch
	}
	f.waiters = append(f.waiters, waiter{at: at, ch: ch})
	return ch
}

// Timer is After with a stop function that withdraws the timer, so a
// waiter that gave up early leaves no pending timer behind (Waiters counts
// only the loops still parked).
func (f *Fake) Timer(d time.Duration) (<-chan time.Time, func()) {
	ch := f.After(d)
	return ch, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, w := range f.waiters {
			if w.ch == ch {
				f.waiters = append(f.waiters[:i], f.waiters[i+1:]...)
				return
			}
		}
	}
}

// Advance moves the clock forward by d and fires due timers.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.fireLocked()
	f.mu.Unlock()
}

// Set moves the clock to t (forward or back) and fires due timers.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	f.now = t
	f.fireLocked()
	f.mu.Unlock()
}

// Waiters reports how many timers are pending; tests use it to know a
// background loop is parked before they advance the clock.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

func (f *Fake) fireLocked() {
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if !w.at.After(f.now) {
			w.ch <- f.now
			continue
		}
		kept = append(kept, w)
	}
	f.waiters = kept
}

// Timer returns a channel that receives once d has elapsed on c, and a
// function that stops the timer: call it when the wait ends another way.
// Clocks without stoppable timers (Real, Shifted) fall back to the Go
// runtime's timer.
func Timer(c Clock, d time.Duration) (<-chan time.Time, func()) {
	if s, ok := c.(interface {
		Timer(time.Duration) (<-chan time.Time, func())
	}); ok {
		return s.Timer(d)
	}
	switch c.(type) {
	case Real, *Shifted:
		t := time.NewTimer(d)
		return t.C, func() { t.Stop() }
	}
	return c.After(d), func() {}
}

// Micros returns t as Bigtable microseconds since the Unix epoch.
func Micros(t time.Time) int64 { return t.UnixMicro() }

// MillisTruncated returns t in microseconds truncated to the millisecond, the
// granularity Bigtable stores.
func MillisTruncated(t time.Time) int64 { return t.UnixMilli() * 1000 }

// Shifted is the real clock moved by an offset that can change while it
// runs: a debugging aid that lets an operator or a multi-process test move
// one server's time (ebbtable serve --debug-clock). Time only moves
// forward: Set refuses to go back before the current reading.
type Shifted struct {
	mu     sync.Mutex
	offset time.Duration
}

// NewShifted returns a Shifted clock reading start now (start may lie in
// the past or the future).
func NewShifted(start time.Time) *Shifted {
	return &Shifted{offset: time.Until(start)}
}

// Now returns the real time plus the offset.
func (s *Shifted) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Now().Add(s.offset)
}

// After waits d of real time (timers run at the real pace).
func (s *Shifted) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Advance moves the clock forward by d (not negative).
func (s *Shifted) Advance(d time.Duration) {
	if d < 0 {
		return
	}
	s.mu.Lock()
	s.offset += d
	s.mu.Unlock()
}

// Set moves the clock to t, if t is not before the current reading; it
// reports whether it moved.
func (s *Shifted) Set(t time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if t.Before(now.Add(s.offset)) {
		return false
	}
	s.offset = t.Sub(now)
	return true
}
