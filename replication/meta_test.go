package replication

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// TestMergeMeta: a cluster adopts the clusters it lacks (never itself),
// and of profiles and their tombstones whichever changed later than what
// it holds; equal times keep its own.
func TestMergeMeta(t *testing.T) {
	kinds := MetaKinds{Cluster: "cluster", Profile: "appprofile", ProfileGone: "appprofile-gone"}
	// A profile's value is its etag here.
	etag := func(v string) int64 { n, _ := strconv.ParseInt(v, 10, 64); return n }
	e := func(kind, name, value string) MetaEntry {
		return MetaEntry{Kind: kind, Instance: "i", Name: name, Value: value}
	}
	local := []MetaEntry{
		e("cluster", "a", "{}"),
		e("appprofile", "p-old", "10"),  // the peer changed it later
		e("appprofile", "p-new", "30"),  // the peer's copy is older
		e("appprofile", "p-del", "10"),  // the peer deleted it later
		e("appprofile-gone", "g", "50"), // deleted here after the peer's change
		e("appprofile-gone", "g2", "5"), // the peer recreated it later
		e("appprofile", "same", "7"),
	}
	peer := []MetaEntry{
		e("cluster", "a", "{}"), e("cluster", "b", "{}"), e("cluster", "self", "{}"),
		e("appprofile", "p-old", "20"), e("appprofile", "p-new", "20"), e("appprofile", "fresh", "1"),
		e("appprofile", "g", "40"), e("appprofile", "g2", "6"), e("appprofile", "same", "7"),
		e("appprofile-gone", "p-del", "11"), e("appprofile-gone", "same", "7"), e("appprofile-gone", "never", "3"),
		e("instance", "x", "{}"),
	}
	var got []string
	for _, c := range MergeMeta("self", local, peer, kinds, etag) {
		got = append(got, fmt.Sprintf("%s %s=%s replace %q", c.Kind, c.Name, c.Value, c.Replace))
	}
	want := []string{
		`cluster b={} replace ""`,
		`appprofile p-old=20 replace "appprofile-gone"`,
		`appprofile fresh=1 replace "appprofile-gone"`,
		`appprofile g2=6 replace "appprofile-gone"`,
		`appprofile-gone p-del=11 replace "appprofile"`,
		`appprofile-gone never=3 replace "appprofile"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("adopted:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := MergeMeta("self", local, local, kinds, etag); len(got) != 0 {
		t.Fatalf("a cluster's own entries adopt nothing: %v", got)
	}
}
