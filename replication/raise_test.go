package replication

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/internal/testkit/poll"
)

// fakeHolders are clusters whose GcHold the test scripts: each reports
// the old rule until the raise's Change reached it (lag more polls after
// it), and the calls are logged.
type fakeHolders struct {
	mu      sync.Mutex
	log     []string
	changed bool
	polls   map[string]int // polls after the change, per cluster
	lag     map[string]int // polls a cluster needs to have the new rule (-1: never)
	fail    map[string]string
	held    map[string]bool
}

func (h *fakeHolders) Hold(_ context.Context, cluster string, hold bool, at *time.Time) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	entry := fmt.Sprintf("%s hold=%v", cluster, hold)
	if at != nil {
		entry += " at=" + at.Format(time.RFC3339)
	}
	h.log = append(h.log, entry)
	if step, ok := h.fail[cluster]; ok && strings.Contains(entry, step) {
		return "", errors.New("unreachable")
	}
	h.held[cluster] = hold
	if !h.changed {
		return "old", nil
	}
	h.polls[cluster]++
	if lag := h.lag[cluster]; lag >= 0 && h.polls[cluster] > lag {
		return "new", nil
	}
	return "old", nil
}

func (h *fakeHolders) change() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.log = append(h.log, "change")
	h.changed = true
	return nil
}

func (h *fakeHolders) anyHeld() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, v := range h.held {
		if v {
			return true
		}
	}
	return false
}

func newHolders() *fakeHolders {
	return &fakeHolders{polls: map[string]int{}, lag: map[string]int{}, fail: map[string]string{}, held: map[string]bool{}}
}

// runRaise runs r in the background on fake clocks, advancing the pace
// clock one poll whenever the raise waits, until it returns.
func runRaise(t *testing.T, r Raise, pace *clock.Fake) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	for {
		select {
		case err := <-done:
			return err
		default:
		}
		if pace.Waiters() > 0 {
			pace.Advance(r.Poll)
			continue
		}
		poll.Eventually(t, "the raise waits or returns", 10*time.Second, func() (bool, string) {
			return pace.Waiters() > 0 || len(done) > 0, ""
		})
	}
}

// TestCoordinatedRaise: every cluster is held, then collects at one
// instant (the raise's clock, not the pace), then the rule changes, the
// raise polls until the slow cluster has it, and every hold is released.
func TestCoordinatedRaise(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	pace := clock.NewFake(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))
	h := newHolders()
	h.lag["c"] = 3
	r := Raise{Clusters: []string{"a", "b", "c"}, Holder: h, Change: h.change, Rule: "new",
		Clock: clock.NewFake(at), Pace: pace, Wait: time.Minute, Poll: 50 * time.Millisecond}
	if err := runRaise(t, r, pace); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"a hold=true", "b hold=true", "c hold=true",
		"a hold=true at=2030-01-02T03:04:05Z", "b hold=true at=2030-01-02T03:04:05Z", "c hold=true at=2030-01-02T03:04:05Z",
		"change",
		"b hold=true",
		"c hold=true", "c hold=true", "c hold=true", "c hold=true",
		"a hold=false", "b hold=false", "c hold=false",
	}
	if got := strings.Join(h.log, "\n"); got != strings.Join(want, "\n") {
		t.Fatalf("calls:\n%s\nwant\n%s", got, strings.Join(want, "\n"))
	}
	if h.anyHeld() {
		t.Fatal("a hold is left")
	}
	if got := pace.Now().Sub(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)); got != 150*time.Millisecond {
		t.Fatalf("the raise waited %v, want three polls", got)
	}
}

// TestCoordinatedRaiseLate: a cluster that never gets the rule ends the
// raise after Wait on the pace clock, Late, with the rule changed and the
// holds released.
func TestCoordinatedRaiseLate(t *testing.T) {
	pace := clock.NewFake(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))
	h := newHolders()
	h.lag["b"] = -1
	r := Raise{Clusters: []string{"a", "b"}, Holder: h, Change: h.change, Rule: "new",
		Clock: pace, Wait: time.Second, Poll: 100 * time.Millisecond}
	err := runRaise(t, r, pace)
	var re *RaiseError
	if !errors.As(err, &re) || !re.Late || re.Cluster != "b" || !strings.Contains(err.Error(), "did not receive the new rule within 1s (holds released; the rule is changed)") {
		t.Fatalf("err %v, want b late", err)
	}
	if !h.changed || h.anyHeld() {
		t.Fatalf("changed %v, held %v: want the rule changed and no hold left", h.changed, h.held)
	}
	if n := h.polls["b"]; n < 10 || n > 14 {
		t.Fatalf("b asked %d times in a second of 100ms polls", n)
	}
}

// TestCoordinatedRaiseUnreachable: a cluster that cannot be held or
// cannot collect stops the raise before the rule changes; the holds taken
// are released.
func TestCoordinatedRaiseUnreachable(t *testing.T) {
	for _, step := range []string{"hold=true", "at="} {
		pace := clock.NewFake(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))
		h := newHolders()
		h.fail["b"] = step
		r := Raise{Clusters: []string{"a", "b", "c"}, Holder: h, Change: h.change, Rule: "new",
			Clock: pace, Wait: time.Second, Poll: 100 * time.Millisecond}
		err := runRaise(t, r, pace)
		var re *RaiseError
		if !errors.As(err, &re) || re.Late || re.Cluster != "b" {
			t.Fatalf("%s: err %v, want b unreachable", step, err)
		}
		if h.changed || h.anyHeld() {
			t.Fatalf("%s: changed %v, held %v: want nothing changed, no hold left", step, h.changed, h.held)
		}
	}
	if got := (&RaiseError{msg: "x"}).Error(); got != "x" {
		t.Fatal(got)
	}
}
