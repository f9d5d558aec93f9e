package table

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
)

// instList is what InstanceMeta lists: "instance/name=value" in order.
func instList(t *testing.T, e *Engine, kind, instance string) []string {
	t.Helper()
	var out []string
	if err := e.InstanceMeta(kind, instance, func(inst, name string, v []byte) error {
		out = append(out, inst+"/"+name+"="+string(v))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// instStored is the same list read from Pebble, past the in-memory copy.
func instStored(t *testing.T, e *Engine, kind, instance string) []string {
	t.Helper()
	s, err := e.loadInstanceMeta()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, en := range s.entries(kind, instance) {
		out = append(out, en.inst+"/"+en.name+"="+string(en.value))
	}
	return out
}

func sameList(a, b []string) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}

func openInstEngine(t *testing.T) (*Engine, string) {
	t.Helper()
	dir := t.TempDir()
	e, err := Open(Options{Dir: dir, Clock: clock.NewFake(time.Unix(1700000000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, dir
}

// TestInstanceMetaCacheFollowsWrites: once the copy is loaded, each write
// (put, replace, delete: the three every server path goes through) is seen
// by the next read, and the copy equals what Pebble holds, also after a
// reopen.
func TestInstanceMetaCacheFollowsWrites(t *testing.T) {
	e, dir := openInstEngine(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(e.PutInstanceMeta("cluster", "i1", "c1", []byte("v1")))
	must(e.PutInstanceMeta("cluster", "i2", "c1", []byte("w1")))
	if got := instList(t, e, "cluster", ""); !sameList(got, []string{"i1/c1=v1", "i2/c1=w1"}) {
		t.Fatalf("listed %v", got)
	}
	steps := []struct {
		name  string
		write func() error
		kind  string
		inst  string
		want  []string
	}{
		{"put new", func() error { return e.PutInstanceMeta("cluster", "i1", "c0", []byte("v0")) }, "cluster", "i1", []string{"i1/c0=v0", "i1/c1=v1"}},
		{"put over", func() error { return e.PutInstanceMeta("cluster", "i1", "c1", []byte("v2")) }, "cluster", "i1", []string{"i1/c0=v0", "i1/c1=v2"}},
		{"replace: removed", func() error { return e.ReplaceInstanceMeta("cluster", "gone", "i1", "c1", []byte("t")) }, "cluster", "i1", []string{"i1/c0=v0"}},
		{"replace: put", nil, "gone", "", []string{"i1/c1=t"}},
		{"replace back", func() error { return e.ReplaceInstanceMeta("gone", "cluster", "i1", "c1", []byte("v3")) }, "gone", "", nil},
		{"replace back: put", nil, "cluster", "", []string{"i1/c0=v0", "i1/c1=v3", "i2/c1=w1"}},
		{"delete", func() error { return e.DeleteInstanceMeta("cluster", "i2", "c1") }, "cluster", "i2", nil},
		{"delete missing", func() error { return e.DeleteInstanceMeta("cluster", "i9", "x") }, "cluster", "", []string{"i1/c0=v0", "i1/c1=v3"}},
		{"other instance untouched", func() error { return e.PutInstanceMeta("cluster", "i10", "c", []byte("z")) }, "cluster", "i1", []string{"i1/c0=v0", "i1/c1=v3"}},
	}
	for _, st := range steps {
		if st.write != nil {
			must(st.write())
		}
		if got := instList(t, e, st.kind, st.inst); !sameList(got, st.want) {
			t.Fatalf("%s: read %v, want %v", st.name, got, st.want)
		}
		if got, stored := instList(t, e, st.kind, st.inst), instStored(t, e, st.kind, st.inst); !sameList(got, stored) {
			t.Fatalf("%s: read %v, Pebble holds %v", st.name, got, stored)
		}
	}
	before := instList(t, e, "cluster", "")
	must(e.Close())
	e2, err := Open(Options{Dir: dir, Clock: clock.NewFake(time.Unix(1700000000, 0))})
	must(err)
	defer e2.Close()
	if got := instList(t, e2, "cluster", ""); !sameList(got, before) {
		t.Fatalf("after reopen %v, before %v", got, before)
	}
}

// TestInstanceMetaCacheRandom checks the copy against Pebble after random
// writes, by kind and by instance, with reads between them (so the copy is
// loaded at random points).
func TestInstanceMetaCacheRandom(t *testing.T) {
	e, _ := openInstEngine(t)
	r := rand.New(rand.NewPCG(1, 2))
	kinds := []string{"a", "ab", "b"}
	insts := []string{"i", "i1", "i2", "j"}
	names := []string{"", "n", "n\x00x", "n1", "z"}
	pick := func(s []string) string { return s[r.IntN(len(s))] }
	for step := 0; step < 200; step++ {
		k, i, n := pick(kinds), pick(insts), pick(names)
		var err error
		switch r.IntN(4) {
		case 0, 1:
			err = e.PutInstanceMeta(k, i, n, []byte(fmt.Sprint(step)))
		case 2:
			err = e.DeleteInstanceMeta(k, i, n)
		case 3:
			err = e.ReplaceInstanceMeta(k, pick(kinds), i, n, []byte(fmt.Sprint("r", step)))
		}
		if err != nil {
			t.Fatal(err)
		}
		if r.IntN(3) == 0 {
			e.dropInstanceMetaCache()
		}
		stored, err := e.loadInstanceMeta()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range kinds {
			for _, i := range append(insts, "") {
				var want []string
				for _, en := range stored.entries(k, i) {
					want = append(want, en.inst+"/"+en.name+"="+string(en.value))
				}
				if got := instList(t, e, k, i); !sameList(got, want) {
					t.Fatalf("step %d: kind %q instance %q: read %q, Pebble holds %q", step, k, i, got, want)
				}
			}
		}
	}
}

// TestInstanceMetaCacheConcurrent: writers of the same entries race each
// other and readers; the copy ends equal to Pebble (it changes in commit
// order).
func TestInstanceMetaCacheConcurrent(t *testing.T) {
	e, _ := openInstEngine(t)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 30; n++ {
				name := fmt.Sprint(n % 3)
				var err error
				if n%5 == 4 {
					err = e.DeleteInstanceMeta("k", "i", name)
				} else {
					err = e.PutInstanceMeta("k", "i", name, []byte(fmt.Sprint(w, "-", n)))
				}
				if err != nil {
					t.Error(err)
					return
				}
				if w == 0 && n%7 == 0 {
					e.dropInstanceMetaCache()
				}
			}
		}()
	}
	for rd := 0; rd < 2; rd++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 50; n++ {
				if err := e.InstanceMeta("k", "", func(string, string, []byte) error { return nil }); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got, stored := instList(t, e, "k", ""), instStored(t, e, "k", ""); !sameList(got, stored) {
		t.Fatalf("read %v, Pebble holds %v", got, stored)
	}
}

// TestInstanceMetaCacheSystemDelete: a background job's deletion batch
// that reaches into the space drops the copy.
func TestInstanceMetaCacheSystemDelete(t *testing.T) {
	e, _ := openInstEngine(t)
	m, err := e.CreateTable(testInst, "t", TableSpec{Families: []FamilySpec{{Name: "cf", GC: gcrule.MustParse("never")}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.PutInstanceMeta("k", "i", "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if got := instList(t, e, "k", ""); len(got) != 1 {
		t.Fatalf("listed %v", got)
	}
	b := e.NewDeleteBatch()
	defer b.Close()
	if err := b.Delete(instanceMetaKey("k", "i", "a")); err != nil {
		t.Fatal(err)
	}
	if err := e.CommitSystem(b, m, nil, nil, true); err != nil {
		t.Fatal(err)
	}
	if got := instList(t, e, "k", ""); len(got) != 0 {
		t.Fatalf("after the deletion the read still lists %v", got)
	}
	for _, c := range []struct {
		lo, hi []byte
		want   bool
	}{
		{instanceMetaKey("k", "i", "a"), nil, true},
		{[]byte{0}, []byte{0xff}, true},
		{instanceMetaPrefix, bytes.Clone(instanceMetaPrefix[:len(instanceMetaPrefix)-1]), false},
		{[]byte("x"), nil, false},
	} {
		if got := touchesInstanceMeta(c.lo, c.hi); got != c.want {
			t.Errorf("touchesInstanceMeta(%q, %q) = %v", c.lo, c.hi, got)
		}
	}
}
