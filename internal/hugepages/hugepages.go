// Package hugepages puts a process's C malloc memory — in a cgo build,
// Pebble's memtable arenas and block cache — on transparent huge pages.
package hugepages

import "strings"

// Tunable asks glibc's malloc to back its large mappings (and its heap)
// with transparent huge pages (madvise(MADV_HUGEPAGE)), on kernels whose
// THP mode is "madvise" as well as "always". A 64 MiB memtable skiplist
// is then a few dozen 2 MiB pages rather than 16,384 pages of 4 KiB, so
// the random node visits of an insert or a seek stop missing the TLB.
// Bulk writes' server CPU per row fell by about an eighth
// (docs/performance.md, "huge pages").
const Tunable = "glibc.malloc.hugetlb=1"

// TunedEnv returns env with Tunable added to GLIBC_TUNABLES, and whether
// it changed anything: not when GLIBC_TUNABLES already sets
// glibc.malloc.hugetlb (to any value: GLIBC_TUNABLES=glibc.malloc.hugetlb=0
// is how to run without huge pages).
func TunedEnv(env []string) ([]string, bool) {
	out := make([]string, 0, len(env)+1)
	found := false
	for _, kv := range env {
		v, ok := strings.CutPrefix(kv, "GLIBC_TUNABLES=")
		if !ok {
			out = append(out, kv)
			continue
		}
		if found {
			continue // the first one counts, as for getenv
		}
		found = true
		for t := range strings.SplitSeq(v, ":") {
			if name, _, _ := strings.Cut(t, "="); name == "glibc.malloc.hugetlb" {
				return env, false
			}
		}
		if v == "" {
			kv = "GLIBC_TUNABLES=" + Tunable
		} else {
			kv += ":" + Tunable
		}
		out = append(out, kv)
	}
	if !found {
		out = append(out, "GLIBC_TUNABLES="+Tunable)
	}
	return out, true
}
