package table

import (
	"slices"
	"sync"
)

// commitSeq hands out change-stream commit timestamps and knows which are
// still in flight, so readers can tell how far the stream is final.
//
// Timestamps are microseconds from the engine's clock, strictly increasing
// across the engine: max(now, last+1). A transaction takes one before its
// batch commits and gives it back after; the closed timestamp is the
// highest timestamp no future or in-flight commit can take: min(in flight)−1,
// or, with nothing in flight, max(last, now−1). Closing a timestamp also
// raises last to it, so a clock that steps back never reopens it.
type commitSeq struct {
	mu       sync.Mutex
	last     int64
	inflight []int64 // ascending: timestamps are handed out in order
	notify   chan struct{}
	// paused > 0 holds begin back while quiet waits for the commits in
	// flight to end; resumed wakes the held ones.
	paused  int
	resumed *sync.Cond
}

func newCommitSeq(last int64) *commitSeq {
	s := &commitSeq{last: last, notify: make(chan struct{})}
	s.resumed = sync.NewCond(&s.mu)
	return s
}

// begin takes the next commit timestamp.
func (s *commitSeq) begin(now int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.paused > 0 {
		s.resumed.Wait()
	}
	ts := max(now, s.last+1)
	s.last = ts
	s.inflight = append(s.inflight, ts)
	return ts
}

// end gives a timestamp back once its batch committed (or failed), and wakes
// waiting readers.
func (s *commitSeq) end(ts int64) {
	s.mu.Lock()
	if i, ok := slices.BinarySearch(s.inflight, ts); ok {
		s.inflight = slices.Delete(s.inflight, i, i+1)
	}
	close(s.notify)
	s.notify = make(chan struct{})
	s.mu.Unlock()
}

// closed returns the closed timestamp at time now.
func (s *commitSeq) closed(now int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.inflight) > 0 {
		return s.inflight[0] - 1
	}
	c := max(s.last, now-1)
	s.last = c
	return c
}

// observe raises the sequence to a commit timestamp seen elsewhere (a
// peer's), so later timestamps follow it: a hybrid logical clock.
func (s *commitSeq) observe(ts int64) {
	s.mu.Lock()
	s.last = max(s.last, ts)
	s.mu.Unlock()
}

// changed returns a channel closed at the next end.
func (s *commitSeq) changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notify
}

// quiet runs f at a moment with no commit in flight, holding new ones back
// meanwhile, and passes it the last timestamp handed out: every recorded
// commit at or below it is applied, none above it has begun. Commits take
// their timestamps holding their row locks and end without taking another,
// so holding begin back cannot keep the ones in flight from ending. done
// ends the wait early (a commit whose fate a failed disk left unknown
// never ends); quiet then returns false without running f.
func (s *commitSeq) quiet(done <-chan struct{}, f func(last int64)) bool {
	s.mu.Lock()
	s.paused++
	defer func() {
		s.paused--
		s.resumed.Broadcast()
		s.mu.Unlock()
	}()
	for len(s.inflight) > 0 {
		ch := s.notify
		s.mu.Unlock()
		select {
		case <-ch:
		case <-done:
			s.mu.Lock()
			return false
		}
		s.mu.Lock()
	}
	f(s.last)
	return true
}
