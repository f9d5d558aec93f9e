package server

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"github.com/ebbtable/ebbtable/table"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// sqlKeys runs query through node n with the official client's prepared
// statements and returns the _key column of its rows, joined.
func sqlKeys(t *testing.T, n *scaleNode, query string) string {
	t.Helper()
	ctx := context.Background()
	ps, err := n.client.PrepareStatement(ctx, query, nil)
	if err != nil {
		t.Fatalf("prepare through %s: %v", n.id, err)
	}
	bs, err := ps.Bind(nil)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	err = bs.Execute(ctx, func(r bigtable.ResultRow) bool {
		var k []byte
		if err := r.GetByName("_key", &k); err != nil {
			t.Errorf("_key: %v", err)
			return false
		}
		keys = append(keys, string(k))
		return true
	})
	if err != nil {
		t.Fatalf("execute through %s: %v", n.id, err)
	}
	return strings.Join(keys, "")
}

func TestClusterSQLSeesEveryTablet(t *testing.T) {
	t.Parallel()
	sc := startScaleCluster(t, "n1", "n2", "n3")
	sc.createTable(t, "n1", "g", "p")
	ctx := context.Background()
	tbl := sc.nodes["n2"].client.Open("t")
	for _, r := range letters() {
		if err := writeScale(t, tbl, r, "v"+r); err != nil {
			t.Fatalf("write %s: %v", r, err)
		}
	}
	// The rows are spread over the three nodes.
	for id, want := range map[string]string{"n1": "abcdef", "n2": "ghijklmno", "n3": "pqrstuvwxyz"} {
		if got := strings.Join(localRows(t, sc.nodes[id]), ""); got != want {
			t.Fatalf("%s holds rows %q, want %q", id, got, want)
		}
	}
	all := strings.Join(letters(), "")
	check := func(when string) {
		t.Helper()
		for _, id := range []string{"n1", "n2", "n3"} {
			n := sc.nodes[id]
			if got := sqlKeys(t, n, "SELECT _key, f['c'] AS v FROM t"); got != all {
				t.Errorf("%s: SELECT through %s: %q", when, id, got)
			}
			if got := sqlKeys(t, n, "SELECT _key FROM t WHERE _key >= 'e' AND _key < 'r'"); got != "efghijklmnopq" {
				t.Errorf("%s: key range through %s: %q", when, id, got)
			}
			if got := sqlKeys(t, n, "SELECT _key FROM t WHERE _key IN ('b', 'h', 'z')"); got != "bhz" {
				t.Errorf("%s: keys through %s: %q", when, id, got)
			}
			if got := sqlKeys(t, n, "SELECT _key FROM t WHERE f['c'] = b'vq'"); got != "q" {
				t.Errorf("%s: filter through %s: %q", when, id, got)
			}
			var count int64
			ps, err := n.client.PrepareStatement(ctx, "SELECT COUNT(*) AS n FROM t", nil)
			if err != nil {
				t.Fatal(err)
			}
			bs, _ := ps.Bind(nil)
			if err := bs.Execute(ctx, func(r bigtable.ResultRow) bool { _ = r.GetByName("n", &count); return true }); err != nil {
				t.Fatal(err)
			}
			if count != 26 {
				t.Errorf("%s: COUNT(*) through %s: %d", when, id, count)
			}
		}
	}
	check("spread")
	// After the middle tablet moves, every node still sees every row.
	tabs, err := sc.nodes["n1"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil || len(tabs.Tablets) != 3 {
		t.Fatalf("tablets: %+v %v", tabs, err)
	}
	if _, err := sc.nodes["n1"].ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: tabs.Tablets[1].Id, To: "n3"}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(localRows(t, sc.nodes["n3"]), ""); got != "ghijklmnopqrstuvwxyz" {
		t.Fatalf("n3 holds %q after the move", got)
	}
	check("moved")
	// The query's cell filter runs on the receiving node: the latest
	// version by default, older ones through temporal arguments.
	m := bigtable.NewMutation()
	m.Set("f", "c", bigtable.Timestamp(2000), []byte("vq2"))
	if err := tbl.Apply(ctx, "q", m); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		n := sc.nodes[id]
		if got := sqlKeys(t, n, "SELECT _key FROM t WHERE f['c'] = b'vq2'"); got != "q" {
			t.Errorf("latest version through %s: %q", id, got)
		}
		if got := sqlKeys(t, n, "SELECT _key FROM t WHERE f['c'] = b'vq'"); got != "" {
			t.Errorf("an older version through %s: %q", id, got)
		}
		if got := sqlKeys(t, n, "SELECT _key FROM t(as_of => TIMESTAMP_FROM_UNIX_MILLIS(1)) WHERE f['c'] = b'vq'"); got != "q" {
			t.Errorf("as_of through %s: %q", id, got)
		}
		if got := sqlKeys(t, n, "SELECT _key FROM t(with_history => TRUE) WHERE ARRAY_LENGTH(f['c']) = 2"); got != "q" {
			t.Errorf("with_history through %s: %q", id, got)
		}
		if got := sqlKeys(t, n, "SELECT _key FROM t(with_history => TRUE, after => TIMESTAMP_FROM_UNIX_MILLIS(1)) WHERE ARRAY_LENGTH(f['c']) = 1"); got != "q" {
			t.Errorf("with_history after 1 ms through %s: %q", id, got)
		}
	}
}

// A query's read that a tablet move interrupts resumes after the last row
// it received, on the tablet's new owner.
func TestClusterSQLReadAcrossMove(t *testing.T) {
	t.Parallel()
	sc := startScaleCluster(t, "n1", "n2")
	sc.createTable(t, "n1", "m")
	ctx := context.Background()
	tbl := sc.nodes["n1"].client.Open("t")
	// Rows large enough that the read of tablet [, m) takes many responses.
	const rows = 24
	big := bytes.Repeat([]byte("x"), 256<<10)
	for i := range rows {
		m := bigtable.NewMutation()
		m.Set("f", "c", bigtable.Timestamp(1000), big)
		if err := tbl.Apply(ctx, fmt.Sprintf("a%02d", i), m); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeScale(t, tbl, "z", "vz"); err != nil {
		t.Fatal(err)
	}
	tabs, err := sc.nodes["n1"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil || len(tabs.Tablets) != 2 || tabs.Tablets[0].Owner != "n1" {
		t.Fatalf("tablets: %+v %v", tabs, err)
	}
	first := tabs.Tablets[0]
	n1 := sc.nodes["n1"]
	x := &clusterData{dataServer: &dataServer{s: n1.srv}, c: n1.srv.cluster}
	moved := make(chan error, 1)
	forwarded := testutil.ToFloat64(n1.srv.cluster.forwarded.WithLabelValues("ReadRows"))
	var got []string
	err = x.sqlRead(ctx, tableRef{instance: "projects/" + testProject + "/instances/" + testInstance, table: "t"}, table.ReadRequest{},
		func(r cell.Row) error {
			got = append(got, string(r.Key))
			if len(got) == 1 {
				// Move the tablet being read and wait until the move asks
				// for its gate: the read stops and must resume on n2.
				go func() {
					_, err := n1.ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: first.Id, To: "n2"})
					moved <- err
				}()
				select {
				case <-n1.srv.cluster.moveWanted(scaleTable, first.Id):
				case <-time.After(10 * time.Second):
					t.Error("the move never asked for the tablet's gate")
				}
			}
			return nil
		})
	if err != nil {
		t.Fatalf("read across the move: %v", err)
	}
	if err := <-moved; err != nil {
		t.Fatalf("move: %v", err)
	}
	var want []string
	for i := range rows {
		want = append(want, fmt.Sprintf("a%02d", i))
	}
	want = append(want, "z")
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("rows read across the move: %v", got)
	}
	// Two pieces forwarded to n2: the rest of [, m) after the move, and [m, ).
	if n := testutil.ToFloat64(n1.srv.cluster.forwarded.WithLabelValues("ReadRows")) - forwarded; n != 2 {
		t.Errorf("%v pieces forwarded, want 2 (the read resumed on the new owner, then the last tablet)", n)
	}
	if n := len(localRows(t, sc.nodes["n1"])); n != 0 {
		t.Errorf("n1 still holds %d rows after the move", n)
	}
	// And through the official client, every node sees every row.
	for _, id := range []string{"n1", "n2"} {
		if got := sqlKeys(t, sc.nodes[id], "SELECT _key FROM t"); got != strings.Join(want, "") {
			t.Errorf("SELECT through %s after the move: %q", id, got)
		}
	}
}

func TestClusterSQLResumeAfter(t *testing.T) {
	keys, ranges := sqlRowSet(table.ReadRequest{Keys: [][]byte{[]byte("a"), []byte("k"), []byte("z")},
		Ranges: []table.RowRange{{Start: []byte("b"), End: []byte("d"), EndClosed: true}, {Start: []byte("m"), StartOpen: true}}})
	ks, rs := sqlResumeAfter(keys, ranges, []byte("c"))
	var got []string
	for _, k := range ks {
		got = append(got, string(k))
	}
	for _, r := range rs {
		got = append(got, fmt.Sprintf("[%q,%q)", r.Start, r.End))
	}
	want := []string{"k", "z", `["c\x00","d\x00")`, `["m\x00","")`}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("after c: %v", got)
	}
	if ks, rs := sqlResumeAfter(keys, ranges[:1], []byte("d")); len(rs) != 0 || len(ks) != 2 {
		t.Errorf("after d: %q %v", ks, rs)
	}
	if f := sqlPushdown(nil); f != nil {
		t.Errorf("pushdown of no filter: %v", f)
	}
}
