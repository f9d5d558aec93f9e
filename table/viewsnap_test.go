package table

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/clock"
)

// Scans through a view batch and a view snapshot reuse the iterators
// earlier scans left: each scan must still see exactly its bounds, a
// batch's scan its writes made since the last scan, a snapshot's scan the
// state when it was taken; nested scans (a scan in another's callback) and
// a scan that failed leave the others right.
func TestViewScansReuseIterators(t *testing.T) {
	e, err := Open(Options{Dir: t.TempDir(), Clock: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { e.Close() }()
	a, b := ViewSpace("i/a"), ViewSpace("i/b")
	type scanner interface {
		Scan(space, lo, hi []byte, reverse bool, fn func(k, v []byte) (bool, error)) error
	}
	scan := func(s scanner, space []byte, lo, hi string, reverse bool) string {
		t.Helper()
		var h []byte
		if hi != "" {
			h = []byte(hi)
		}
		var out []string
		if err := s.Scan(space, []byte(lo), h, reverse, func(k, v []byte) (bool, error) {
			out = append(out, string(k)+"="+string(v))
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
		return strings.Join(out, " ")
	}
	vb := e.NewViewBatch()
	for _, k := range []string{"1", "2", "3", "4"} {
		vb.Set(a, []byte(k), []byte("a"+k))
		vb.Set(b, []byte(k), []byte("b"+k))
	}
	if err := vb.Commit(); err != nil {
		t.Fatal(err)
	}
	vb.Close()
	if v, ok, err := e.GetViewState(a, []byte("2")); err != nil || !ok || string(v) != "a2" {
		t.Fatalf("GetViewState a/2: %q %v %v", v, ok, err)
	}
	if v, ok, err := e.GetViewState(a, []byte("5")); err != nil || ok {
		t.Fatalf("GetViewState a/5: %q %v %v", v, ok, err)
	}

	vb = e.NewViewBatch()
	defer func() { vb.Close() }()
	snap, err := e.NewViewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	for _, s := range []struct {
		name string
		s    scanner
	}{{"batch", vb}, {"snapshot", snap}} {
		if got, want := scan(s.s, a, "", "", false), "1=a1 2=a2 3=a3 4=a4"; got != want {
			t.Errorf("%s: a: %s, want %s", s.name, got, want)
		}
		if got, want := scan(s.s, b, "2", "4", false), "2=b2 3=b3"; got != want {
			t.Errorf("%s: b [2,4): %s, want %s", s.name, got, want)
		}
		if got, want := scan(s.s, a, "2", "", true), "4=a4 3=a3 2=a2"; got != want {
			t.Errorf("%s: a from 2 reversed: %s, want %s", s.name, got, want)
		}
		var nested []string
		if err := s.s.Scan(a, []byte("3"), nil, false, func(k, _ []byte) (bool, error) {
			nested = append(nested, string(k)+":"+scan(s.s, b, string(k), "", false))
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
		if got, want := strings.Join(nested, " "), "3:3=b3 4=b4 4:4=b4"; got != want {
			t.Errorf("%s: nested: %s, want %s", s.name, got, want)
		}
		boom := errors.New("boom")
		if err := s.s.Scan(a, nil, nil, false, func(_, _ []byte) (bool, error) { return false, boom }); !errors.Is(err, boom) {
			t.Errorf("%s: a failed scan: %v", s.name, err)
		}
		if got, want := scan(s.s, b, "", "2", false), "1=b1"; got != want {
			t.Errorf("%s: b after a failed scan: %s, want %s", s.name, got, want)
		}
	}
	// The batch's writes since its last scans show in the next; the
	// committed state and the snapshot do not have them.
	vb.Set(a, []byte("5"), []byte("a5"))
	vb.Delete(a, []byte("1"))
	vb.Set(b, []byte("2"), []byte("B2"))
	if got, want := scan(vb, a, "", "", false), "2=a2 3=a3 4=a4 5=a5"; got != want {
		t.Errorf("batch after its writes: a: %s, want %s", got, want)
	}
	if got, want := scan(vb, b, "", "3", true), "2=B2 1=b1"; got != want {
		t.Errorf("batch after its writes: b: %s, want %s", got, want)
	}
	vb.DeleteSpace(b)
	if got := scan(vb, b, "", "", false); got != "" {
		t.Errorf("batch after deleting b: %s", got)
	}
	if err := vb.Commit(); err != nil {
		t.Fatal(err)
	}
	if got, want := scan(snap, a, "", "", false), "1=a1 2=a2 3=a3 4=a4"; got != want {
		t.Errorf("snapshot after a commit: a: %s, want %s", got, want)
	}
	if got, want := scan(snap, b, "", "", false), "1=b1 2=b2 3=b3 4=b4"; got != want {
		t.Errorf("snapshot after a commit: b: %s, want %s", got, want)
	}
	if got, want := scan(committed{e}, a, "", "", false), "2=a2 3=a3 4=a4 5=a5"; got != want {
		t.Errorf("committed: a: %s, want %s", got, want)
	}
}

// committed scans an engine's committed view state.
type committed struct{ e *Engine }

func (c committed) Scan(space, lo, hi []byte, reverse bool, fn func(k, v []byte) (bool, error)) error {
	return c.e.ScanViewState(space, lo, hi, reverse, fn)
}
