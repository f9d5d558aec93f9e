package server

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
)

// A keyed scan's resume token is a position in the table: rows written or
// deleted between the attempts, before or after that position, are
// neither repeated nor skipped. A grouped query's tokens are positions.
func TestSQLResumeAfterChanges(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, smallSQLBatches)
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	big := bytes.Repeat([]byte("x"), resumeBig)
	set := func(keys ...string) {
		t.Helper()
		var muts []*bigtable.Mutation
		for range keys {
			m := bigtable.NewMutation()
			m.Set("f", "q", 1000, big)
			muts = append(muts, m)
		}
		if errs, err := tbl.ApplyBulk(ctx, keys, muts); err != nil || errs != nil {
			t.Fatal(err, errs)
		}
	}
	del := func(key string) {
		t.Helper()
		m := bigtable.NewMutation()
		m.DeleteRow()
		if err := tbl.Apply(ctx, key, m); err != nil {
			t.Fatal(err)
		}
	}
	var keys []string
	for i := range 12 {
		keys = append(keys, fmt.Sprintf("r%03d", i))
	}
	set(keys...)
	raw := env.raw(t)
	prep := prepareRaw(t, raw, "SELECT _key, f['q'] AS q FROM t WHERE _key >= 'r'", nil)
	req := &btpb.ExecuteQueryRequest{InstanceName: sqlInstance, PreparedQuery: prep.GetPreparedQuery()}
	full, err := executeRaw(t, raw, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(full.tokens) < 3 {
		t.Fatalf("%d tokens, want several batches", len(full.tokens))
	}
	// The first batch was delivered; then rows change on both sides of
	// its last row.
	got := full.rows[0] / 2
	last := keys[got-1]
	del(keys[0])           // before the position
	del(keys[got])         // the next row
	set("r000a", last+"x") // one before, one just after
	req.ResumeToken = full.tokens[0]
	rest, err := executeRaw(t, raw, req)
	if err != nil {
		t.Fatal(err)
	}
	var gotKeys []string
	for j := 0; j < len(rest.values); j += 2 {
		gotKeys = append(gotKeys, string(rest.values[j].GetBytesValue()))
	}
	want := append([]string{last + "x"}, keys[got+1:]...)
	if !slices.Equal(gotKeys, want) {
		t.Fatalf("resumed after %q: rows %q, want %q", last, gotKeys, want)
	}
	// The last token of the resumed stream: nothing more, the same token.
	req.ResumeToken = rest.tokens[len(rest.tokens)-1]
	again, err := executeRaw(t, raw, req)
	if err != nil || len(again.values) != 0 || len(again.tokens) != 1 || !bytes.Equal(again.tokens[0], req.ResumeToken) {
		t.Fatalf("retry with the last token: %v, %+v", err, again)
	}

	// A grouped query's tokens are positions (its groups' keys).
	prep = prepareRaw(t, raw, "SELECT _key, COUNT(*) AS n FROM t GROUP BY _key", nil)
	req = &btpb.ExecuteQueryRequest{InstanceName: sqlInstance, PreparedQuery: prep.GetPreparedQuery()}
	counted, err := executeRaw(t, raw, req)
	if err != nil {
		t.Fatal(err)
	}
	tok := counted.tokens[len(counted.tokens)-1]
	if string(tok[:4]) != resumePosMagic {
		t.Fatalf("grouped query's token %q, want a position", tok)
	}
	// A keyed token does not fit a counted plan.
	req.ResumeToken = full.tokens[0]
	if _, err := executeRaw(t, raw, req); err == nil {
		t.Fatal("a keyed token on a grouped query was accepted")
	}
}
