package sqlquery

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/internal/testkit/enginetest"
	"github.com/ebbtable/ebbtable/table"
)

// DISTINCT aggregates merged from parts: rows spread over three parts
// (a cluster's nodes), values repeated within and across parts, rows put
// in and taken out at random. After every step, each group's state merged
// from the three parts' states outputs what one state holding every row
// outputs.
func TestMergeDistinctParts(t *testing.T) {
	eng, _ := enginetest.Open(t, table.Options{})
	const inst = "projects/p/instances/i"
	if _, err := eng.CreateTable(inst, "t", table.TableSpec{Families: []table.FamilySpec{{Name: "f"}}}); err != nil {
		t.Fatal(err)
	}
	cat := EngineCatalog{Engine: eng, Instance: inst}
	const q = "SELECT f['g'] AS g, COUNT(*) AS n, COUNT(DISTINCT TO_INT64(f['v'])) AS d, SUM(DISTINCT TO_INT64(f['v'])) AS s, " +
		"AVG(DISTINCT TO_INT64(f['v'])) AS a, MIN(DISTINCT TO_INT64(f['v'])) AS mn, MAX(DISTINCT TO_INT64(f['v'])) AS mx, " +
		"BIT_OR(DISTINCT TO_INT64(f['v'])) AS bo, BIT_AND(DISTINCT TO_INT64(f['v'])) AS ba, BIT_XOR(DISTINCT TO_INT64(f['v'])) AS bx, " +
		"SUM(TO_INT64(f['v'])) AS plain FROM t GROUP BY g"
	plan, err := Prepare(cat, q, nil)
	if err != nil {
		t.Fatal(err)
	}
	ic, err := plan.Incremental()
	if err != nil {
		t.Fatal(err)
	}
	if !ic.HasDistinct() {
		t.Fatal("HasDistinct is false")
	}
	ctx := context.Background()
	now := time.Unix(1e9, 0)
	whole := &memStore{m: map[string][]byte{}}
	parts := []*memStore{{m: map[string][]byte{}}, {m: map[string][]byte{}}, {m: map[string][]byte{}}}
	type row struct {
		part int
		c    *Contribution
	}
	rows := map[string]row{}
	apply := func(st Store, key string, c *Contribution, sign int64) {
		t.Helper()
		g, err := LoadGroup(st, c.Group)
		if err != nil {
			t.Fatal(err)
		}
		if g, err = ic.Apply(st, []byte(key), c, sign, g); err != nil {
			t.Fatal(err)
		}
		if err := ic.SaveGroup(st, c.Group, g); err != nil {
			t.Fatal(err)
		}
	}
	outputs := func(st Store) string {
		t.Helper()
		var out []string
		err := st.Scan([]byte{'G'}, []byte{'H'}, false, func(k, _ []byte) (bool, error) {
			gid := k[1:]
			g, err := LoadGroup(st, gid)
			if err != nil {
				return false, err
			}
			vals, err := ic.Output(ctx, st, gid, g, now)
			out = append(out, fmt.Sprintf("%s %v", Format(Array(vals)), err))
			return true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(out, "\n")
	}
	merged := func() string {
		t.Helper()
		m := ic.NewMerge()
		for _, p := range parts {
			err := p.Scan([]byte{'G'}, []byte{'H'}, false, func(k, _ []byte) (bool, error) {
				gid := append([]byte{}, k[1:]...)
				g, err := LoadGroup(p, gid)
				if err != nil {
					return false, err
				}
				b, err := ic.Partial(p, gid, g)
				if err != nil {
					return false, err
				}
				return true, m.Add(gid, b)
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		var out []string
		if err := m.Output(ctx, now, func(_ []byte, vals []Value, err error) error {
			out = append(out, fmt.Sprintf("%s %v", Format(Array(vals)), err))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return strings.Join(out, "\n")
	}
	rng := rand.New(rand.NewPCG(7, 22))
	for step := 0; step < 400; step++ {
		key := fmt.Sprintf("r%02d", rng.IntN(40))
		if old, ok := rows[key]; ok {
			apply(parts[old.part], key, old.c, -1)
			apply(whole, key, old.c, -1)
			delete(rows, key)
		}
		if rng.IntN(3) > 0 {
			gv := []byte(fmt.Sprint("g", rng.IntN(3)))
			v := Value(int64(rng.IntN(9)))
			if rng.IntN(10) == 0 {
				v = nil
			}
			c := &Contribution{Group: appendKey(nil, gv), Keys: []Value{gv}, Inputs: [][]Value{nil}}
			for range len(ic.q.aggs) - 1 {
				c.Inputs = append(c.Inputs, []Value{v})
			}
			r := row{part: rng.IntN(len(parts)), c: c}
			apply(parts[r.part], key, c, 1)
			apply(whole, key, c, 1)
			rows[key] = r
		}
		if got, want := merged(), outputs(whole); got != want {
			t.Fatalf("step %d: merged from the parts:\n%s\none state of every row:\n%s", step, got, want)
		}
	}
}
