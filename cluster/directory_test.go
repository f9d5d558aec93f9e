package cluster

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/clock"
)

func bounds(d Directory) string {
	s := ""
	for _, t := range d.Tablets {
		s += fmt.Sprintf("%d[%s,%s)%s ", t.ID, t.Start, t.End, t.Owner)
	}
	return s
}

func TestNewDirectory(t *testing.T) {
	for _, c := range []struct {
		splits []string
		owners []string
		want   string
	}{
		{nil, []string{"a"}, "1[,)a "},
		{[]string{"m"}, []string{"a", "b"}, "1[,m)a 2[m,)b "},
		{[]string{"t", "g", "g", ""}, []string{"a", "b"}, "1[,g)a 2[g,t)b 3[t,)a "},
	} {
		var splits [][]byte
		for _, s := range c.splits {
			splits = append(splits, []byte(s))
		}
		d, err := NewDirectory("i/t", 7, splits, c.owners)
		if err != nil {
			t.Fatal(err)
		}
		if got := bounds(d); got != c.want {
			t.Errorf("splits %q: got %s, want %s", c.splits, got, c.want)
		}
	}
	if _, err := NewDirectory("i/t", 7, nil, nil); !errors.Is(err, ErrNoNodes) {
		t.Errorf("no owners: %v", err)
	}
}

func TestSplitMergeOwner(t *testing.T) {
	d, _ := NewDirectory("i/t", 1, [][]byte{[]byte("m")}, []string{"a", "b"})
	d, err := d.Split([]byte("f"))
	if err != nil {
		t.Fatal(err)
	}
	d, err = d.Split([]byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := bounds(d), "1[,f)a 3[f,m)a 2[m,x)b 4[x,)b "; got != want {
		t.Fatalf("after splits: %s, want %s", got, want)
	}
	for _, bad := range []string{"", "m", "f"} {
		if _, err := d.Split([]byte(bad)); !errors.Is(err, ErrInvalid) {
			t.Errorf("split at %q: %v", bad, err)
		}
	}
	if _, err := d.Merge(3); !errors.Is(err, ErrInvalid) {
		t.Errorf("merge across owners: %v", err)
	}
	if _, err := d.Merge(4); !errors.Is(err, ErrInvalid) {
		t.Errorf("merge of the last tablet: %v", err)
	}
	m, err := d.Merge(1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := bounds(m), "1[,m)a 2[m,x)b 4[x,)b "; got != want {
		t.Errorf("after merge: %s, want %s", got, want)
	}
	o, err := d.WithOwner(3, "c")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := bounds(o), "1[,f)a 3[f,m)c 2[m,x)b 4[x,)b "; got != want {
		t.Errorf("after owner change: %s, want %s", got, want)
	}
	if bounds(d) != "1[,f)a 3[f,m)a 2[m,x)b 4[x,)b " {
		t.Errorf("WithOwner changed its receiver: %s", bounds(d))
	}
	if _, err := d.WithOwner(99, "c"); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown tablet: %v", err)
	}
}

func TestValidateRejects(t *testing.T) {
	good, _ := NewDirectory("i/t", 1, [][]byte{[]byte("m")}, []string{"a"})
	for name, mut := range map[string]func(*Directory){
		"gap":       func(d *Directory) { d.Tablets[1].Start = []byte("n") },
		"no owner":  func(d *Directory) { d.Tablets[0].Owner = "" },
		"dup id":    func(d *Directory) { d.Tablets[1].ID = 1 },
		"open last": func(d *Directory) { d.Tablets[1].End = []byte("z") },
		"bad first": func(d *Directory) { d.Tablets[0].Start = []byte("a") },
		"empty":     func(d *Directory) { d.Tablets = nil },
	} {
		d := good.Clone()
		mut(&d)
		if err := d.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestLocateAndCut(t *testing.T) {
	d, _ := NewDirectory("i/t", 1, [][]byte{[]byte("g"), []byte("p")}, []string{"a", "b", "c"})
	for k, want := range map[string]int{"": 0, "a": 0, "g": 1, "gz": 1, "p": 2, "zzz": 2} {
		if got := d.Locate([]byte(k)); got != want {
			t.Errorf("Locate(%q) = %d, want %d", k, got, want)
		}
	}
	pieces := d.Cut([][]byte{[]byte("q"), []byte("b")}, []Range{{Start: []byte("e"), End: []byte("r")}, {Start: []byte("x")}, {Start: []byte("z"), End: []byte("a")}})
	var got []string
	for _, p := range pieces {
		s := fmt.Sprintf("%d:", p.Tablet.ID)
		for _, k := range p.Keys {
			s += " k=" + string(k)
		}
		for _, r := range p.Ranges {
			s += fmt.Sprintf(" [%s,%s)", r.Start, r.End)
		}
		got = append(got, s)
	}
	want := []string{"1: k=b [e,g)", "2: [g,p)", "3: k=q [p,r) [x,)"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Cut = %q, want %q", got, want)
	}
	if all := d.Cut(nil, []Range{{}}); len(all) != 3 || len(all[0].Ranges[0].Start) != 0 || string(all[2].Ranges[0].Start) != "p" || len(all[2].Ranges[0].End) != 0 {
		t.Errorf("the whole table: %+v", all)
	}
}

func TestPlacement(t *testing.T) {
	nodes := []Node{{ID: "n2"}, {ID: "n1"}, {ID: "n3", Draining: true}}
	d, _ := NewDirectory("i/t", 1, [][]byte{[]byte("m")}, []string{"n1", "n1"})
	got, err := Place(3, nodes, []Directory{d})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"n2", "n2", "n1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Place = %v, want %v", got, want)
	}
	if _, err := Place(1, []Node{{ID: "x", Draining: true}}, nil); !errors.Is(err, ErrNoNodes) {
		t.Errorf("only draining nodes: %v", err)
	}
	moves, err := PlanDrain("n1", nodes, []Directory{d})
	if err != nil {
		t.Fatal(err)
	}
	if len(moves) != 2 || moves[0].To != "n2" || moves[1].To != "n2" || moves[0].Tablet != 1 || moves[1].Tablet != 2 {
		t.Errorf("drain n1: %v", moves)
	}
	if _, err := PlanDrain("n1", []Node{{ID: "n1"}}, []Directory{d}); !errors.Is(err, ErrNoNodes) {
		t.Errorf("drain of the only node: %v", err)
	}
	if o := Orphans([]Node{{ID: "n2"}}, []Directory{d}); len(o) != 2 || o[0].From != "n1" {
		t.Errorf("orphans: %v", o)
	}
}

func TestSplitPoint(t *testing.T) {
	tab := Tablet{ID: 1, Start: []byte("b"), End: []byte("y")}
	keys := [][]byte{[]byte("b"), []byte("d"), []byte("k"), []byte("q"), []byte("")}
	offs := []int64{10, 40, 90, 120, 150}
	if got := SplitPoint(tab, keys, offs, 100); string(got) != "k" {
		t.Errorf("SplitPoint = %q, want k", got)
	}
	if got := SplitPoint(tab, keys, offs, 1000); got != nil {
		t.Errorf("a small tablet split at %q", got)
	}
}

func TestFence(t *testing.T) {
	c := clock.NewFake(time.Unix(1000, 0))
	f := NewFence(c, time.Second)
	if f.Live() {
		t.Fatal("live before any renewal")
	}
	sent := c.Now()
	c.Advance(2 * time.Second) // the answer took two seconds
	f.Renewed(sent, 10*time.Second)
	if !f.Live() {
		t.Fatal("not live after a renewal")
	}
	c.Advance(6 * time.Second) // 8 s after sending: 9 s deadline
	if !f.Live() {
		t.Fatal("not live before the deadline")
	}
	f.Renewed(sent.Add(-5*time.Second), 10*time.Second) // a stale answer
	if !f.Live() {
		t.Fatal("a stale renewal moved the deadline back")
	}
	c.Advance(time.Second) // 9 s: margin reached; etcd could expire at 10 s after the grant
	if f.Live() {
		t.Fatal("live at the deadline")
	}
	f.Renewed(c.Now(), 10*time.Second)
	f.Lost()
	if f.Live() {
		t.Fatal("live after Lost")
	}
}
