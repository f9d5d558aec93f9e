package cluster

import (
	"fmt"
	"strings"
	"testing"
)

func TestPlanTakeOvers(t *testing.T) {
	dirs := []Directory{
		{Table: "i/u", Tablets: []Tablet{{ID: 1, End: []byte("g"), Owner: "n3"}, {ID: 2, Start: []byte("g"), Owner: "n1"}}},
		{Table: "i/t", Tablets: []Tablet{{ID: 1, End: []byte("g"), Owner: "n3"}, {ID: 2, Start: []byte("g"), End: []byte("p"), Owner: "n4"},
			{ID: 3, Start: []byte("p"), Owner: "n3"}}},
	}
	nodes := []Node{{ID: "n1"}, {ID: "n2"}, {ID: "n5", Draining: true}}
	plan, err := PlanTakeOvers(nodes, dirs, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range plan {
		var ids []string
		for _, tb := range g.Tablets {
			ids = append(ids, fmt.Sprint(tb.ID))
		}
		got = append(got, fmt.Sprintf("%s:%s[%s]→%s", g.Table, g.Dead, strings.Join(ids, ","), g.To))
	}
	// Table order, then dead owner; the least loaded taker (n2 had none,
	// then n1 with 1 against n2's 2), never a draining node.
	want := "i/t:n3[1,3]→n2 i/t:n4[2]→n1 i/u:n3[1]→n1"
	if strings.Join(got, " ") != want {
		t.Fatalf("plan %s, want %s", strings.Join(got, " "), want)
	}
	// A taker ruled out for a group (a checkpoint of the dead node reaches
	// a tablet it serves) is passed over; a group nobody may take waits.
	plan, _ = PlanTakeOvers(nodes, dirs, func(dead, table, node string) bool { return table == "i/t" && dead == "n3" && node == "n2" })
	if len(plan) != 3 || plan[0].To != "n1" {
		t.Errorf("n2 ruled out: %+v", plan)
	}
	plan, _ = PlanTakeOvers(nodes, dirs, func(dead, table, node string) bool { return dead == "n4" })
	if len(plan) != 2 {
		t.Errorf("n4's group ruled out everywhere: %+v", plan)
	}
	if _, err := PlanTakeOvers([]Node{{ID: "n5", Draining: true}}, dirs, nil); err != ErrNoNodes {
		t.Errorf("no takers: %v", err)
	}
	if plan, _ := PlanTakeOvers([]Node{{ID: "n1"}, {ID: "n3"}, {ID: "n4"}}, dirs, nil); len(plan) != 0 {
		t.Errorf("nobody dead: %v", plan)
	}
}

func TestRecoveryPieces(t *testing.T) {
	tb := func(s, e string) Tablet { return Tablet{Start: []byte(s), End: []byte(e)} }
	cp := func(s, e string, after uint64) Checkpointed {
		return Checkpointed{Start: []byte(s), End: []byte(e), After: after}
	}
	for _, tc := range []struct {
		name    string
		tablets []Tablet
		cps     []Checkpointed
		want    string
	}{
		{"exact", []Tablet{tb("g", "p")}, []Checkpointed{cp("g", "p", 7)}, "[g,p)@7#0"},
		{"split since", []Tablet{tb("g", "k")}, []Checkpointed{cp("g", "p", 7)}, "[g,k)@7#0"},
		{"merged since", []Tablet{tb("g", "")}, []Checkpointed{cp("g", "p", 7), cp("p", "", 9)}, "[g,p)@7#0 [p,)@9#1"},
		{"new table part", []Tablet{tb("", "m")}, []Checkpointed{cp("g", "k", 7)}, "[,g)@3#-1 [g,k)@7#0 [k,m)@3#-1"},
		{"none", []Tablet{tb("", "")}, nil, "[,)@3#-1"},
	} {
		var got []string
		for _, p := range RecoveryPieces(tc.tablets, tc.cps, 3) {
			got = append(got, fmt.Sprintf("[%s,%s)@%d#%d", p.Start, p.End, p.After, p.Entry))
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, strings.Join(got, " "), tc.want)
		}
	}
	out := Outside([]byte("a"), nil, []Tablet{tb("c", "e"), tb("g", "")})
	var got []string
	for _, r := range out {
		got = append(got, fmt.Sprintf("[%s,%s)", r[0], r[1]))
	}
	if strings.Join(got, " ") != "[a,c) [e,g)" {
		t.Errorf("outside: %v", got)
	}
	if Overlaps([]byte("a"), []byte("c"), []byte("c"), nil) || !Overlaps(nil, nil, []byte("x"), []byte("y")) {
		t.Error("overlaps")
	}
}
