//go:build linux && cgo

package hugepages

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// reexecEnv makes this test binary act as a process calling Reexec at its
// start (TestMain): it prints its pid and GLIBC_TUNABLES before and after.
const reexecEnv = "EBBTABLE_TEST_HUGEPAGES_REEXEC"

func TestMain(m *testing.M) {
	if os.Getenv(reexecEnv) == "1" {
		fmt.Printf("pid %d tunables %q\n", os.Getpid(), os.Getenv("GLIBC_TUNABLES"))
		reexec() // Reexec without the race build's skip
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestReexec checks Reexec re-executes the process once, keeping its pid,
// with the tunable set, and not when GLIBC_TUNABLES already names it.
func TestReexec(t *testing.T) {
	run := func(env ...string) []string {
		cmd := exec.Command(os.Args[0], "-test.run", "^$")
		cmd.Env = append(append(os.Environ(), reexecEnv+"=1"), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	lines := run("GLIBC_TUNABLES=")
	if len(lines) != 2 {
		t.Fatalf("want two starts (the re-exec), got %q", lines)
	}
	pid, _, _ := strings.Cut(lines[0], " tunables")
	if !strings.HasPrefix(lines[1], pid+" tunables") || !strings.Contains(lines[1], `"glibc.malloc.hugetlb=1"`) {
		t.Fatalf("re-exec lost the pid or the tunable: %q", lines)
	}
	if lines := run("GLIBC_TUNABLES=glibc.malloc.hugetlb=0"); len(lines) != 1 {
		t.Fatalf("re-executed although the tunable was set: %q", lines)
	}
}
