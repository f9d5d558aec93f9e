package server

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// resumeEnv is a table t of rows big enough (resumeBig) that a result
// streams in batches of a few rows.
type resumeEnv struct {
	t   *testing.T
	env *testEnv
	tbl *bigtable.Table
	raw btpb.BigtableClient
	big []byte
}

// The resume tests' servers end an ExecuteQuery batch after 8 KiB of
// rows and send it in pieces of 2 KiB (the sqlBatch knob; batchBytes
// and pieceBytes are 1 MiB and 256 KiB), and their rows carry resumeBig
// bytes: four rows to a batch of five pieces, as rows of 300 KiB have at
// the real sizes, with a hundredth of the bytes to write, read and copy
// under the race detector (the nine tests took 6.4 CPU-s, now 0.9).
const resumeBig = 2400

// smallSQLBatches is the servers' option of the resume tests.
func smallSQLBatches(o *Options) {
	o.knobs = &testKnobs{}
	o.knobs.sqlBatch.set(sqlBatchSize{batch: 8 << 10, piece: 2 << 10})
}

func newResumeEnv(t *testing.T) *resumeEnv {
	env := newTestEnv(t, smallSQLBatches)
	return &resumeEnv{t: t, env: env, tbl: env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()}),
		raw: env.raw(t), big: bytes.Repeat([]byte("x"), resumeBig)}
}

// put writes row's f:g (when g is not empty) and a big f:big at ts.
func (r *resumeEnv) put(row, g string, ts bigtable.Timestamp) {
	r.t.Helper()
	m := bigtable.NewMutation()
	if g != "" {
		m.Set("f", "g", ts, []byte(g))
	}
	m.Set("f", "big", ts, r.big)
	if err := r.tbl.Apply(context.Background(), row, m); err != nil {
		r.t.Fatal(err)
	}
}

func (r *resumeEnv) del(row string) {
	r.t.Helper()
	m := bigtable.NewMutation()
	m.DeleteRow()
	if err := r.tbl.Apply(context.Background(), row, m); err != nil {
		r.t.Fatal(err)
	}
}

// run executes q: the whole stream, then (after change) a retry from the
// first batch's token. It returns the first column of the rows of the
// first batch and of the retry, as text.
func (r *resumeEnv) run(q string, ncols int, change func(first []string)) (first, rest []string) {
	r.t.Helper()
	prep := prepareRaw(r.t, r.raw, q, nil)
	req := &btpb.ExecuteQueryRequest{InstanceName: sqlInstance, PreparedQuery: prep.GetPreparedQuery()}
	full, err := executeRaw(r.t, r.raw, req)
	if err != nil {
		r.t.Fatal(err)
	}
	if len(full.tokens) < 3 {
		r.t.Fatalf("%s: %d tokens, want several batches", q, len(full.tokens))
	}
	text := func(vs []*btpb.Value) []string {
		var out []string
		for j := 0; j < len(vs); j += ncols {
			v := vs[j]
			if b := v.GetBytesValue(); b != nil {
				out = append(out, string(b))
			} else {
				out = append(out, fmt.Sprint(v.GetTimestampValue().AsTime().UnixMilli()))
			}
		}
		return out
	}
	first = text(full.values[:full.rows[0]])
	change(first)
	req.ResumeToken = full.tokens[0]
	res, err := executeRaw(r.t, r.raw, req)
	if err != nil {
		r.t.Fatalf("%s: resumed: %v", q, err)
	}
	rest = text(res.values)
	// The retry's last token: nothing more, the same token.
	req.ResumeToken = res.tokens[len(res.tokens)-1]
	again, err := executeRaw(r.t, r.raw, req)
	if err != nil || len(again.values) != 0 || !bytes.Equal(again.tokens[len(again.tokens)-1], req.ResumeToken) {
		r.t.Fatalf("%s: retry with the last token: %v, %d values", q, err, len(again.values))
	}
	return first, rest
}

// ORDER BY … LIMIT resumes after the ORDER BY position of the last row
// got: rows changed before it are not sent again, rows after it are sent
// as they are now, and the LIMIT counts the rows got before.
func TestSQLResumeOrderByLimit(t *testing.T) {
	t.Parallel()
	r := newResumeEnv(t)
	var keys []string
	for i := range 12 {
		keys = append(keys, fmt.Sprintf("r%02d", i))
		r.put(keys[i], "", 1000)
	}
	now := slices.Clone(keys)
	first, rest := r.run("SELECT _key, f['big'] FROM t ORDER BY _key DESC LIMIT 10", 2, func(first []string) {
		last := first[len(first)-1]
		next := keys[slices.Index(keys, last)-1]
		for _, k := range []string{keys[11], next} {
			r.del(k) // before the position, and the next row
			now = slices.DeleteFunc(now, func(x string) bool { return x == k })
		}
		for _, k := range []string{last + "x", keys[0] + "0"} {
			r.put(k, "", 1000) // before it (DESC), and after it
			now = append(now, k)
		}
	})
	if len(first) < 2 || first[0] != keys[11] {
		t.Fatalf("first batch %q", first)
	}
	slices.Sort(now)
	slices.Reverse(now)
	var want []string
	for _, k := range now {
		if k < first[len(first)-1] && len(want) < 10-len(first) {
			want = append(want, k)
		}
	}
	if !slices.Equal(rest, want) {
		t.Fatalf("first %q, resumed %q, want %q", first, rest, want)
	}
}

// An unordered grouped query's groups come in the order of their keys and
// resume after the last group got.
func TestSQLResumeGrouped(t *testing.T) {
	t.Parallel()
	r := newResumeEnv(t)
	var groups []string
	for i := range 12 {
		groups = append(groups, fmt.Sprintf("g%02d", i))
		r.put("r"+groups[i], groups[i], 1000)
	}
	first, rest := r.run("SELECT f['g'] AS g, MAX(f['big']) AS big FROM t GROUP BY f['g']", 2, func(first []string) {
		last := first[len(first)-1]
		i := slices.Index(groups, last)
		r.del("r" + groups[0])        // a group before the position goes
		r.put("rnew", last+"x", 1000) // a new group after it
		r.del("r" + groups[i+1])      // the next group goes
	})
	i := slices.Index(groups, first[len(first)-1])
	if !slices.Equal(first, groups[:i+1]) {
		t.Fatalf("first batch %q, want groups in key order", first)
	}
	want := append([]string{groups[i] + "x"}, groups[i+2:]...)
	if !slices.Equal(rest, want) {
		t.Fatalf("resumed %q, want %q", rest, want)
	}
}

// UNPACK resumes after the row key and timestamp of the last row got.
func TestSQLResumeUnpack(t *testing.T) {
	t.Parallel()
	r := newResumeEnv(t)
	for _, row := range []string{"a", "b", "c"} {
		for ms := int64(1); ms <= 5; ms++ {
			r.put(row, "", bigtable.Timestamp(ms*1000))
		}
	}
	_, rest := r.run("SELECT _timestamp, _key, big FROM UNPACK((SELECT _key, f['big'] AS big FROM t(with_history => TRUE)))", 3, func(first []string) {
		if !slices.Equal(first, []string{"5", "4", "3", "2"}) {
			t.Fatalf("first batch at %q, want a's 5, 4, 3, 2", first)
		}
		r.put("a", "", 6000) // newer than a's 2: before the position
		m := bigtable.NewMutation()
		m.DeleteTimestampRange("f", "big", 1000, 2000) // a's 1: the next
		if err := r.tbl.Apply(context.Background(), "a", m); err != nil {
			t.Fatal(err)
		}
		r.put("b", "", 7000) // after it
	})
	if want := []string{"7", "5", "4", "3", "2", "1", "5", "4", "3", "2", "1"}; !slices.Equal(rest, want) {
		t.Fatalf("resumed at %q, want %q", rest, want)
	}
}

// A query with no position (over a view whose rows are not table rows in
// key order, without ORDER BY) resumes by count while its result is
// unchanged, and refuses, with FAILED_PRECONDITION, a retry whose result
// changed before the point reached.
func TestSQLResumeCountedRefusesChange(t *testing.T) {
	t.Parallel()
	r := newResumeEnv(t)
	for i := range 12 {
		r.put(fmt.Sprintf("r%02d", i), "", 1000)
	}
	iac := testkit.InstanceAdmin(t, r.env.srv.Addr(), testProject)
	if err := iac.CreateLogicalView(context.Background(), testInstance, &bigtable.LogicalViewInfo{LogicalViewID: "lv",
		Query: "SELECT _key, f['big'] AS big FROM t ORDER BY _key LIMIT 11"}); err != nil {
		t.Fatal(err)
	}
	const q = "SELECT _key, big FROM lv"
	first, rest := r.run(q, 2, func([]string) {})
	if got := append(first, rest...); len(got) != 11 || got[0] != "r00" || got[10] != "r10" {
		t.Fatalf("unchanged: %q", got)
	}
	prep := prepareRaw(t, r.raw, q, nil)
	req := &btpb.ExecuteQueryRequest{InstanceName: sqlInstance, PreparedQuery: prep.GetPreparedQuery()}
	full, err := executeRaw(t, r.raw, req)
	if err != nil {
		t.Fatal(err)
	}
	r.del("r00")
	req.ResumeToken = full.tokens[0]
	_, err = executeRaw(t, r.raw, req)
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("retry after the result changed: %v, want FAILED_PRECONDITION", err)
	}
	// A change after the point reached is read.
	req.ResumeToken = nil
	full, err = executeRaw(t, r.raw, req)
	if err != nil {
		t.Fatal(err)
	}
	r.del("r10")
	req.ResumeToken = full.tokens[0]
	res, err := executeRaw(t, r.raw, req)
	if err != nil {
		t.Fatal(err)
	}
	// r01 … r11 were 11 rows; with r10 gone the view's LIMIT 11 has 10.
	if n := (full.rows[0] + len(res.values)) / 2; n != 10 {
		t.Fatalf("%d rows in all, want 10", n)
	}
}

// A retry with a resume token is not expired by time (the client
// prepares again only before its first token): past valid_until it still
// resumes.
func TestSQLResumeTokenOutlivesValidUntil(t *testing.T) {
	t.Parallel()
	r := newResumeEnv(t)
	for i := range 12 {
		r.put(fmt.Sprintf("r%02d", i), fmt.Sprintf("g%02d", i), 1000)
	}
	prep := prepareRaw(t, r.raw, "SELECT f['g'] AS g, MAX(f['big']) AS big FROM t GROUP BY f['g']", nil)
	req := &btpb.ExecuteQueryRequest{InstanceName: sqlInstance, PreparedQuery: prep.GetPreparedQuery()}
	full, err := executeRaw(t, r.raw, req)
	if err != nil {
		t.Fatal(err)
	}
	r.env.clock.Advance(2 * preparedTTL)
	if _, err := executeRaw(t, r.raw, req); preconditionType(err) != "PREPARED_QUERY_EXPIRED" {
		t.Fatalf("without a token past valid_until: %v, want PREPARED_QUERY_EXPIRED", err)
	}
	req.ResumeToken = full.tokens[0]
	rest, err := executeRaw(t, r.raw, req)
	if err != nil {
		t.Fatalf("with a token past valid_until: %v", err)
	}
	if got := full.rows[0] + len(rest.values); got != len(full.values) {
		t.Fatalf("%d values in the first batch and the retry, want %d", got, len(full.values))
	}
}

// Through the official client, results of every positioned kind stream
// in several batches (tokens between them) and arrive whole and in order.
func TestSQLPositionedThroughClient(t *testing.T) {
	t.Parallel()
	r := newResumeEnv(t)
	for i := range 9 {
		r.put(fmt.Sprintf("r%d", i), fmt.Sprintf("g%d", i%5), bigtable.Timestamp(1000*(i%2+1)))
		r.put(fmt.Sprintf("r%d", i), "", 3000)
	}
	for _, c := range []struct{ q, want string }{
		{"SELECT _key, f['big'] AS big FROM t ORDER BY _key DESC LIMIT 7", "r8 r7 r6 r5 r4 r3 r2"},
		{"SELECT f['g'] AS g, MAX(f['big']) AS big FROM t GROUP BY f['g']", "g0 g1 g2 g3 g4"},
		{"SELECT _key, big FROM UNPACK((SELECT _key, f['big'] AS big FROM t(with_history => TRUE))) LIMIT 5", "r0 r0 r1 r1 r2"},
	} {
		got, err := sqlRows(t, r.env.client, c.q)
		if err != nil {
			t.Fatalf("%s: %v", c.q, err)
		}
		var keys []string
		for _, row := range got {
			k, _, _ := strings.Cut(row, "|")
			keys = append(keys, k)
		}
		if strings.Join(keys, " ") != c.want {
			t.Errorf("%s: %s, want %s", c.q, strings.Join(keys, " "), c.want)
		}
	}
}

// A logical view reading a table row by row (directly, or through another
// such view) is positioned by row key: a stream over it resumes after the
// last row got, whatever changed.
func TestSQLResumeOverLogicalView(t *testing.T) {
	t.Parallel()
	for _, view := range []string{"lv", "lv2"} {
		t.Run(view, func(t *testing.T) {
			r := newResumeEnv(t)
			var keys []string
			for i := range 12 {
				keys = append(keys, fmt.Sprintf("r%02d", i))
				r.put(keys[i], "", 1000)
			}
			iac := testkit.InstanceAdmin(t, r.env.srv.Addr(), testProject)
			// lv first: lv2 reads it.
			for _, v := range [][2]string{{"lv", "SELECT _key, f['big'] AS big FROM t"}, {"lv2", "SELECT _key, big FROM lv WHERE big IS NOT NULL"}} {
				if err := iac.CreateLogicalView(context.Background(), testInstance, &bigtable.LogicalViewInfo{LogicalViewID: v[0], Query: v[1]}); err != nil {
					t.Fatal(err)
				}
			}
			first, rest := r.run("SELECT _key, big FROM "+view, 2, func(first []string) {
				last := first[len(first)-1]
				i := slices.Index(keys, last)
				r.del(keys[0])            // before the position
				r.del(keys[i+1])          // the next row
				r.put(last+"x", "", 1000) // just after it
			})
			i := slices.Index(keys, first[len(first)-1])
			want := append([]string{keys[i] + "x"}, keys[i+2:]...)
			if !slices.Equal(rest, want) {
				t.Fatalf("resumed after %q: %q, want %q", keys[i], rest, want)
			}
		})
	}
}
