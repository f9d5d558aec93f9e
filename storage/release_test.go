package storage

import (
	"sort"
	"strings"
	"testing"
)

// TestReleaseSharedRefs: a database's reference markers go, and each
// object left without a marker with them; objects another database
// references stay, and names that only look like markers are left alone.
func TestReleaseSharedRefs(t *testing.T) {
	st, err := SharedDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, n := range []string{
		"abcd-5-000001.sst", "abcd-5-000001.sst.ref.5.000001", "abcd-5-000001.sst.ref.7.000003", // shared with 7
		"ef01-5-000002.sst", "ef01-5-000002.sst.ref.5.000002", // only 5's
		"0a0b-7-000009.sst", "0a0b-7-000009.sst.ref.5.000004", "0a0b-7-000009.sst.ref.7.000009", // 7's, attached by 5
		"backup.p.i.c.x.ref.5.1", "ebbtable-ckpt-n5-1-0", "1234-55-000001.sst.ref.55.000001",
	} {
		if err := PutObject(st, n, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	refs, objects, err := ReleaseSharedRefs(st, 5)
	if err != nil || refs != 3 || objects != 1 {
		t.Fatalf("released %d markers, %d objects (%v), want 3, 1", refs, objects, err)
	}
	left, err := st.List("", "")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(left)
	want := "0a0b-7-000009.sst 0a0b-7-000009.sst.ref.7.000009 1234-55-000001.sst.ref.55.000001 abcd-5-000001.sst abcd-5-000001.sst.ref.7.000003 backup.p.i.c.x.ref.5.1 ebbtable-ckpt-n5-1-0"
	if got := strings.Join(left, " "); got != want {
		t.Errorf("left:\n%s\nwant:\n%s", got, want)
	}
}
