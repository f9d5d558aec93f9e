package hugepages

import (
	"slices"
	"testing"
)

func TestTunedEnv(t *testing.T) {
	for _, c := range []struct {
		in      []string
		want    []string
		changed bool
	}{
		{[]string{"A=1"}, []string{"A=1", "GLIBC_TUNABLES=glibc.malloc.hugetlb=1"}, true},
		{[]string{"GLIBC_TUNABLES=", "A=1"}, []string{"GLIBC_TUNABLES=glibc.malloc.hugetlb=1", "A=1"}, true},
		{[]string{"GLIBC_TUNABLES=glibc.malloc.arena_max=2"}, []string{"GLIBC_TUNABLES=glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"}, true},
		// Already set, to any value: left alone (how to opt out).
		{[]string{"GLIBC_TUNABLES=glibc.malloc.hugetlb=0"}, []string{"GLIBC_TUNABLES=glibc.malloc.hugetlb=0"}, false},
		{[]string{"GLIBC_TUNABLES=glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2", "B=2"}, []string{"GLIBC_TUNABLES=glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2", "B=2"}, false},
		// A second GLIBC_TUNABLES is dropped: getenv sees the first.
		{[]string{"GLIBC_TUNABLES=x=1", "GLIBC_TUNABLES=glibc.malloc.hugetlb=0"}, []string{"GLIBC_TUNABLES=x=1:glibc.malloc.hugetlb=1"}, true},
	} {
		got, changed := TunedEnv(c.in)
		if changed != c.changed || !slices.Equal(got, c.want) {
			t.Errorf("TunedEnv(%q) = %q, %v; want %q, %v", c.in, got, changed, c.want, c.changed)
		}
	}
}
