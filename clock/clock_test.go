package clock

import (
	"testing"
	"time"
)

func TestFakeFiresOnlyWhenDue(t *testing.T) {
	start := time.Unix(1000, 0)
	f := NewFake(start)
	ch := f.After(time.Minute)
	f.Advance(59 * time.Second)
	select {
	case <-ch:
		t.Fatal("timer fired early")
	default:
	}
	f.Advance(time.Second)
	select {
	case got := <-ch:
		if !got.Equal(start.Add(time.Minute)) {
			t.Fatalf("fired at %v", got)
		}
	default:
		t.Fatal("timer did not fire")
	}
	if f.Waiters() != 0 {
		t.Fatalf("waiters left: %d", f.Waiters())
	}
}

func TestMillisTruncated(t *testing.T) {
	tm := time.UnixMicro(3023483279876543)
	if got := MillisTruncated(tm); got != 3023483279876000 {
		t.Fatalf("got %d", got)
	}
}

func TestShifted(t *testing.T) {
	var s Shifted
	if d := s.Now().Sub(time.Now()); d > time.Second || d < -time.Second {
		t.Fatalf("unshifted clock off by %v", d)
	}
	s.Advance(24 * time.Hour)
	if d := s.Now().Sub(time.Now()); d < 23*time.Hour {
		t.Fatalf("advanced clock off by %v", d)
	}
	target := time.Date(2099, 1, 2, 0, 0, 0, 0, time.UTC)
	if !s.Set(target) || s.Now().Sub(target) > time.Second {
		t.Fatalf("set: %v", s.Now())
	}
	if s.Set(target.Add(-time.Hour)) {
		t.Fatal("clock went back")
	}
}

// TestTimerStops: a stopped fake timer is no longer pending and never
// fires; an unstopped one fires as After's does.
func TestTimerStops(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	stopped, stop := Timer(f, time.Second)
	kept, _ := Timer(f, time.Second)
	if f.Waiters() != 2 {
		t.Fatalf("waiters: %d", f.Waiters())
	}
	stop()
	stop() // twice is harmless
	if f.Waiters() != 1 {
		t.Fatalf("waiters after stop: %d", f.Waiters())
	}
	f.Advance(time.Second)
	select {
	case <-stopped:
		t.Fatal("a stopped timer fired")
	default:
	}
	select {
	case <-kept:
	default:
		t.Fatal("the kept timer did not fire")
	}
	ch, stop := Timer(Real{}, time.Hour)
	stop()
	select {
	case <-ch:
		t.Fatal("a stopped real timer fired")
	case <-time.After(time.Millisecond):
	}
}
