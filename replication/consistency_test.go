package replication

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/internal/testkit/poll"
)

// fakeApplied are peers' ReplicationStatus answers, moved by the test.
type fakeApplied struct {
	mu      sync.Mutex
	closed  map[string]int64
	applied map[string]map[string]int64 // peer → origin → commit
	down    map[string]bool
	calls   int
}

func (f *fakeApplied) Applied(_ context.Context, peer, instance, table string) (int64, map[string]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.down[peer] || instance != "i" || table != "t" {
		return 0, nil, errors.New("unreachable")
	}
	return f.closed[peer], maps.Clone(f.applied[peer]), nil
}

func (f *fakeApplied) set(peer, origin string, commit int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied[peer][origin] = commit
}

func newState(local map[string]int64, st *fakeApplied, peers ...string) TableState {
	return TableState{Self: "a", Instance: "i", Table: "t", Peers: peers, Status: st,
		Checkpoint: func(origin string) (int64, bool, error) {
			c, ok := local[origin]
			return c, ok, nil
		}}
}

// TestConsistencyToken: marks round-trip through a token; foreign and
// broken tokens say which they are.
func TestConsistencyToken(t *testing.T) {
	marks := Marks{"a": 1_767_225_600_000_000, "b": 0}
	tok, err := marks.Token()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseToken(tok)
	if err != nil || !maps.Equal(back, marks) {
		t.Fatalf("%q → %v %v, want %v", tok, back, err, marks)
	}
	for tok, want := range map[string]string{
		"1234":     `"1234" is not a consistency token from this instance`,
		"ebb1.e30": `consistency token "ebb1.e30" does not decode`, // {}
		"ebb1.!!":  `consistency token "ebb1.!!" does not decode`,
	} {
		var bad *BadTokenError
		if _, err := ParseToken(tok); !errors.As(err, &bad) || err.Error() != want {
			t.Errorf("ParseToken(%q) = %v, want %s", tok, err, want)
		}
	}
}

// TestConsistent: a token's marks hold once this cluster and every peer
// applied every other cluster's records through its mark; a peer down is
// not consistent.
func TestConsistent(t *testing.T) {
	ctx := context.Background()
	st := &fakeApplied{closed: map[string]int64{"b": 50, "c": 70},
		applied: map[string]map[string]int64{"b": {"a": 100, "c": 70}, "c": {"a": 90, "b": 50}}, down: map[string]bool{}}
	ts := newState(map[string]int64{"b": 50, "c": 70}, st, "b", "c")
	marks := ts.MakeMarks(ctx, 100)
	if want := (Marks{"a": 100, "b": 50, "c": 70}); !maps.Equal(marks, want) {
		t.Fatalf("marks %v, want %v", marks, want)
	}
	if ok, err := ts.Consistent(ctx, marks); ok || err != nil {
		t.Fatalf("c has a's records through 90 only: %v %v", ok, err)
	}
	st.set("c", "a", 100)
	if ok, err := ts.Consistent(ctx, marks); !ok || err != nil {
		t.Fatalf("all caught up: %v %v", ok, err)
	}
	st.down["c"] = true
	if ok, _ := ts.Consistent(ctx, marks); ok {
		t.Fatal("c is down: not consistent")
	}
	if m := ts.MakeMarks(ctx, 120); !maps.Equal(m, Marks{"a": 120, "b": 50}) {
		t.Fatalf("marks without c: %v", m)
	}
	// Here: a lacks c's records through 70.
	ts = newState(map[string]int64{"b": 50}, st, "b")
	if ok, _ := ts.Consistent(ctx, Marks{"a": 1, "c": 70}); ok {
		t.Fatal("no checkpoint for c here: not consistent")
	}
}

// TestWaitConsistent: the check polls on the pace clock until the peer
// catches up, answers false once the wait has passed, and stops when the
// server does.
func TestWaitConsistent(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	st := &fakeApplied{applied: map[string]map[string]int64{"b": {"a": 10}}, down: map[string]bool{}}
	ts := newState(map[string]int64{}, st, "b")
	marks := Marks{"a": 20}
	wait := func(pace *clock.Fake, stop chan struct{}, each func(polls int)) (bool, error) {
		type result struct {
			ok  bool
			err error
		}
		done := make(chan result, 1)
		go func() {
			ok, err := ts.WaitConsistent(ctx, marks, pace, 3*time.Second, 20*time.Millisecond, stop)
			done <- result{ok, err}
		}()
		for polls := 0; ; polls++ {
			poll.Eventually(t, "the check waits or answers", 10*time.Second, func() (bool, string) {
				return pace.Waiters() > 0 || len(done) > 0, ""
			})
			if len(done) > 0 {
				r := <-done
				return r.ok, r.err
			}
			each(polls)
			pace.Advance(20 * time.Millisecond)
		}
	}

	pace := clock.NewFake(start)
	ok, err := wait(pace, nil, func(polls int) {
		if polls == 4 {
			st.set("b", "a", 20)
		}
	})
	if !ok || err != nil || pace.Now().Sub(start) != 100*time.Millisecond {
		t.Fatalf("caught up after 5 polls: %v %v after %v", ok, err, pace.Now().Sub(start))
	}

	st.set("b", "a", 10)
	pace = clock.NewFake(start)
	ok, err = wait(pace, nil, func(int) {})
	if ok || err != nil || pace.Now().Sub(start) <= 3*time.Second || pace.Now().Sub(start) > 3*time.Second+40*time.Millisecond {
		t.Fatalf("never caught up: %v %v after %v, want false after 3s", ok, err, pace.Now().Sub(start))
	}

	stop := make(chan struct{})
	pace = clock.NewFake(start)
	ok, err = wait(pace, stop, func(polls int) {
		if polls == 2 {
			close(stop)
		}
	})
	if ok || err != nil {
		t.Fatalf("stopped: %v %v", ok, err)
	}

	// Stopped while it waits for its next poll: the poll's timer goes
	// with it (a test that counts a fake clock's waiters would count it).
	stop = make(chan struct{})
	pace = clock.NewFake(start)
	done := make(chan bool, 1)
	go func() {
		ok, _ := ts.WaitConsistent(ctx, marks, pace, 3*time.Second, 20*time.Millisecond, stop)
		done <- ok
	}()
	poll.Eventually(t, "the check waits for its next poll", 10*time.Second, func() (bool, string) {
		return pace.Waiters() > 0, ""
	})
	close(stop)
	if <-done {
		t.Fatal("a stopped check answered true")
	}
	if n := pace.Waiters(); n != 0 {
		t.Fatalf("a stopped check left %d timers on the pace clock", n)
	}
}
