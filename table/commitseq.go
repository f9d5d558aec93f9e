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
}

func newCommitSeq(last int64) *commitSeq {
	return &commitSeq{last: last, notify: make(chan struct{})}
}

// begin takes the next commit timestamp.
func (s *commitSeq) begin(now int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
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
