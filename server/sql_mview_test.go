package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/sqlquery"
)

// sqlRows runs q through the official client (PrepareStatement, Bind,
// Execute) and formats each row as "v1|v2|...", BYTES as text, INT64 as a
// number.
func sqlRows(t *testing.T, c *bigtable.Client, q string) ([]string, error) {
	t.Helper()
	ctx := context.Background()
	ps, err := c.PrepareStatement(ctx, q, nil)
	if err != nil {
		return nil, err
	}
	bs, err := ps.Bind(nil)
	if err != nil {
		return nil, err
	}
	var got []string
	err = bs.Execute(ctx, func(r bigtable.ResultRow) bool {
		var parts []string
		for i := range r.Metadata.Columns {
			var v any
			if err := r.GetByIndex(i, &v); err != nil {
				t.Fatal(err)
			}
			switch x := v.(type) {
			case []byte:
				parts = append(parts, string(x))
			case *int64:
				parts = append(parts, fmt.Sprint(*x))
			default:
				parts = append(parts, fmt.Sprint(x))
			}
		}
		got = append(got, strings.Join(parts, "|"))
		return true
	})
	return got, err
}

// SQL's FROM a maintained materialized view reads the view's stored rows,
// brought up to date first: a row put into the stored state shows (a
// recomputation would not have it), a write shows in the next read after
// maintenance read only that row, and key conditions narrow the read of
// the state.
func TestSQLFromMaterializedViewReadsState(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	put := func(row, g string, v int64) {
		t.Helper()
		m := bigtable.NewMutation()
		m.Set("f", "g", 1000, []byte(g))
		m.Set("f", "v", 1000, binary.BigEndian.AppendUint64(nil, uint64(v)))
		if err := tbl.Apply(ctx, row, m); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 60 {
		put(fmt.Sprintf("r%03d", i), string(rune('a'+i%3)), int64(i))
	}
	const query = "SELECT f['g'] AS _key, COUNT(*) AS n, SUM(TO_INT64(f['v'])) AS s FROM t GROUP BY f['g']"
	iac := testkit.InstanceAdmin(t, env.srv.Addr(), testProject)
	if err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: "mv", Query: query}); err != nil {
		t.Fatal(err)
	}
	if env.srv.planMaint(sqlInstance, "mv", query) == nil {
		t.Fatal("the view is not maintained")
	}
	check := func(what, q string, want ...string) {
		t.Helper()
		got, err := sqlRows(t, env.client, q)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: %q, want %q", what, got, want)
		}
	}
	check("whole view", "SELECT * FROM mv", "a|20|570", "b|20|590", "c|20|610")

	// A row only the stored state has: SQL shows it, so it read the state.
	mv, _, err := env.srv.keptView(sqlInstance, "mv")
	if err != nil || mv == nil {
		t.Fatal("no kept view", err)
	}
	forged := outKey([]byte("bb"), []byte("forged"))
	vb := env.srv.engine.NewViewBatch()
	if err := vb.Set(mv.space, forged, sqlquery.EncodeValue([]byte{0}, sqlquery.Struct{[]byte("bb"), int64(7), int64(8)})); err != nil {
		t.Fatal(err)
	}
	if err := vb.Commit(); err != nil {
		t.Fatal(err)
	}
	vb.Close()
	check("with a stored-only row", "SELECT _key, n, s FROM mv", "a|20|570", "b|20|590", "bb|7|8", "c|20|610")
	check("a key range of the state", "SELECT _key, n FROM mv WHERE _key > 'a' AND _key < 'c'", "b|20", "bb|7")
	check("a key of the state", "SELECT n FROM mv WHERE _key = 'bb'", "7")
	check("ordered", "SELECT _key, s FROM mv ORDER BY s DESC LIMIT 2", "c|610", "b|590")
	// Through a logical view over it.
	if err := iac.CreateLogicalView(ctx, testInstance, &bigtable.LogicalViewInfo{LogicalViewID: "lv", Query: "SELECT _key, n FROM mv WHERE n > 10"}); err != nil {
		t.Fatal(err)
	}
	check("a logical view over it", "SELECT * FROM lv", "a|20", "b|20", "c|20")
	vb = env.srv.engine.NewViewBatch()
	if err := vb.Delete(mv.space, forged); err != nil {
		t.Fatal(err)
	}
	if err := vb.Commit(); err != nil {
		t.Fatal(err)
	}
	vb.Close()

	// A write: the next read shows it; maintenance read only that row.
	before := env.srv.mviews.baseRows.Load()
	put("r999", "b", 1000)
	check("after a write", "SELECT * FROM mv WHERE _key = 'b'", "b|21|1590")
	if n := env.srv.mviews.baseRows.Load() - before; n > 4 {
		t.Errorf("a one-row write made maintenance read %d base rows (cells), want the row's", n)
	}
	m := bigtable.NewMutation()
	m.DeleteRow()
	if err := tbl.Apply(ctx, "r000", m); err != nil {
		t.Fatal(err)
	}
	check("after a deletion", "SELECT _key, n, s FROM mv", "a|19|570", "b|21|1590", "c|20|610")
}

// A stream over a kept view resumes after the position of its last row:
// groups created, changed or deleted between the attempts before that
// position are not repeated, those after it are read as they are now.
func TestSQLResumeOverMaterializedView(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, smallSQLBatches)
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	big := bytes.Repeat([]byte("x"), resumeBig)
	put := func(row, g string) {
		t.Helper()
		m := bigtable.NewMutation()
		m.Set("f", "g", 1000, []byte(g))
		m.Set("f", "big", 1000, big)
		if err := tbl.Apply(ctx, row, m); err != nil {
			t.Fatal(err)
		}
	}
	del := func(row string) {
		t.Helper()
		m := bigtable.NewMutation()
		m.DeleteRow()
		if err := tbl.Apply(ctx, row, m); err != nil {
			t.Fatal(err)
		}
	}
	var groups []string
	for i := range 12 {
		g := fmt.Sprintf("g%02d", i)
		groups = append(groups, g)
		put("r"+g, g)
	}
	iac := testkit.InstanceAdmin(t, env.srv.Addr(), testProject)
	const query = "SELECT f['g'] AS _key, COUNT(*) AS n, MAX(f['big']) AS big FROM t GROUP BY f['g']"
	if err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: "mv", Query: query}); err != nil {
		t.Fatal(err)
	}
	raw := env.raw(t)
	prep := prepareRaw(t, raw, "SELECT _key, n, big FROM mv WHERE LENGTH(big) > 0", nil)
	req := &btpb.ExecuteQueryRequest{InstanceName: sqlInstance, PreparedQuery: prep.GetPreparedQuery()}
	full, err := executeRaw(t, raw, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(full.tokens) < 3 {
		t.Fatalf("%d tokens, want several batches", len(full.tokens))
	}
	got := full.rows[0] / 3
	last := groups[got-1]
	// Changes on both sides of the position.
	del("r" + groups[0])   // before it
	del("r" + groups[got]) // the next group goes
	put("rnew1", "g00a")   // a new group before it
	put("rnew2", last+"x") // and one just after it
	put("rmore", groups[got+1])
	req.ResumeToken = full.tokens[0]
	rest, err := executeRaw(t, raw, req)
	if err != nil {
		t.Fatal(err)
	}
	var gotRows []string
	for j := 0; j+2 < len(rest.values); j += 3 {
		gotRows = append(gotRows, fmt.Sprintf("%s:%d", rest.values[j].GetBytesValue(), rest.values[j+1].GetIntValue()))
	}
	want := []string{last + "x:1", groups[got+1] + ":2"}
	for _, g := range groups[got+2:] {
		want = append(want, g+":1")
	}
	if !slices.Equal(gotRows, want) {
		t.Fatalf("resumed after %q: %q, want %q", last, gotRows, want)
	}
	// The last token again: nothing more.
	req.ResumeToken = rest.tokens[len(rest.tokens)-1]
	again, err := executeRaw(t, raw, req)
	if err != nil || len(again.values) != 0 {
		t.Fatalf("retry with the last token: %v, %+v", err, again)
	}
}

// A maintained view stays right across a table's restore from a backup and
// its undelete, which write no view log: the state is rebuilt (or kept)
// to match the table read back.
func TestMaterializedViewAfterRestoreAndUndelete(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	put := func(tbl *bigtable.Table, row, g string) {
		t.Helper()
		m := bigtable.NewMutation()
		m.Set("f", "g", 1000, []byte(g))
		if err := tbl.Apply(ctx, row, m); err != nil {
			t.Fatal(err)
		}
	}
	put(tbl, "r1", "a")
	put(tbl, "r2", "a")
	put(tbl, "r3", "b")
	const query = "SELECT f['g'] AS _key, COUNT(*) AS n FROM t GROUP BY f['g']"
	iac := testkit.InstanceAdmin(t, env.srv.Addr(), testProject)
	if err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: "mv", Query: query}); err != nil {
		t.Fatal(err)
	}
	check := func(what string, want ...string) {
		t.Helper()
		for _, q := range []string{"SELECT * FROM mv", query} {
			got, err := sqlRows(t, env.client, q)
			if err != nil {
				t.Fatalf("%s: %s: %v", what, q, err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s: %s: %q, want %q", what, q, got, want)
			}
		}
	}
	check("before", "a|2", "b|1")
	if err := env.admin.CreateBackup(ctx, "t", "c1", "bk", env.clock.Now().Add(7*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	put(tbl, "r4", "b")
	check("after a write", "a|2", "b|2")
	if err := env.admin.DeleteTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := env.admin.RestoreTable(ctx, "t", "c1", "bk"); err != nil {
		t.Fatal(err)
	}
	check("restored from the backup", "a|2", "b|1")
	put(tbl, "r5", "c")
	check("a write after the restore", "a|2", "b|1", "c|1")
	if err := env.admin.DeleteTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	raw := env.rawAdmin(t)
	if _, err := raw.UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: tableName("t")}); err != nil {
		t.Fatal(err)
	}
	check("undeleted", "a|2", "b|1", "c|1")
	put(tbl, "r6", "c")
	check("a write after the undelete", "a|2", "b|1", "c|2")
}

// SQL reads of a maintained view while rows are written: each read sees
// every write acknowledged before it began and none not yet begun, and
// the view's count never goes backwards.
func TestSQLKeptViewUnderWrites(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	iac := testkit.InstanceAdmin(t, env.srv.Addr(), testProject)
	const query = "SELECT '*' AS _key, COUNT(*) AS n FROM t GROUP BY _key"
	if err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: "mv", Query: query}); err != nil {
		t.Fatal(err)
	}
	const writes = 150
	var started, acked atomic.Int64
	done := make(chan error, 1)
	go func() {
		for i := range writes {
			m := bigtable.NewMutation()
			m.Set("f", "q", 1000, []byte("v"))
			started.Add(1)
			if err := tbl.Apply(ctx, fmt.Sprintf("r%04d", i), m); err != nil {
				done <- err
				return
			}
			acked.Add(1)
		}
		done <- nil
	}()
	ps, err := env.client.PrepareStatement(ctx, "SELECT n FROM mv", nil)
	if err != nil {
		t.Fatal(err)
	}
	last := int64(0)
	for reads := 0; ; reads++ {
		lo := acked.Load()
		bs, err := ps.Bind(nil)
		if err != nil {
			t.Fatal(err)
		}
		n := int64(0)
		if err := bs.Execute(ctx, func(r bigtable.ResultRow) bool {
			if err := r.GetByName("n", &n); err != nil {
				t.Fatal(err)
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		hi := started.Load()
		if n < lo || n > hi || n < last {
			t.Fatalf("read %d: count %d, want within [%d, %d] and not below %d", reads, n, lo, hi, last)
		}
		last = n
		if n == writes {
			break
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
