package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// cbtEnv is an environment for running the real cbt and ebbtable side by
// side: HOME holds the given .cbtrc (none if empty), cbt alone is on the
// PATH (without -creds cbt would otherwise run gcloud, see TestCbt), and
// extra is appended.
func cbtEnv(t *testing.T, cbtrc string, extra ...string) (env []string, cbtPath string) {
	t.Helper()
	cbtPath, err := exec.LookPath("cbt")
	if err != nil {
		t.Skip("cbt is not on the PATH")
	}
	home := t.TempDir()
	if cbtrc != "" {
		if err := os.WriteFile(filepath.Join(home, ".cbtrc"), []byte(cbtrc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := t.TempDir()
	if err := os.Symlink(cbtPath, filepath.Join(bin, "cbt")); err != nil {
		t.Fatal(err)
	}
	return append([]string{"HOME=" + home, "PATH=" + bin}, extra...), cbtPath
}

// TestCbtrcShared runs the real cbt and ebbtable with no flags against one
// server: both take project and instance from the same ~/.cbtrc, so each
// sees the tables the other made. Then the rest of the precedence
// (configHelp).
func TestCbtrcShared(t *testing.T) {
	srv := startServer(t, t.TempDir())
	t.Parallel()
	env, cbtPath := cbtEnv(t, "project = shared-p\n\ninstance=shared-i\ntimeout = 20s\ncreds = /nonexistent.json\n",
		"BIGTABLE_EMULATOR_HOST="+srv.addr)
	cbt := func(args ...string) result {
		t.Helper()
		return run(t, env, cbtPath, args...).mustSucceed(t, "cbt "+strings.Join(args, " "))
	}
	ebb := func(extra []string, args ...string) result {
		t.Helper()
		return run(t, append(env[:len(env):len(env)], extra...), ebbtableBin, args...)
	}

	cbt("createtable", "from-cbt")
	cbt("createfamily", "from-cbt", "cf")
	cbt("set", "from-cbt", "r1", "cf:c=hello@1000")
	ebb(nil, "createtable", "from-ebbtable", "cf").mustSucceed(t, "ebbtable createtable")

	wantOutput(t, "cbt ls", cbt("ls").stdout, "from-cbt\nfrom-ebbtable\n")
	wantOutput(t, "ebbtable ls", ebb(nil, "ls").mustSucceed(t, "ebbtable ls").stdout, "from-cbt\nfrom-ebbtable\n")
	if got := ebb(nil, "read", "from-cbt").mustSucceed(t, "ebbtable read").stdout; !strings.Contains(got, `"hello"`) {
		t.Errorf("ebbtable read from-cbt:\n%s", got)
	}
	// The tables live in shared-p/shared-i, not in the default instance.
	wantOutput(t, "ls --project ebbtable --instance ebbtable",
		ebb(nil, "ls", "--project", "ebbtable", "--instance", "ebbtable").mustSucceed(t, "ls with flags").stdout, "")
	// ~/.cbtrc wins over EBBTABLE_*.
	wantOutput(t, "ls with EBBTABLE_INSTANCE",
		ebb([]string{"EBBTABLE_PROJECT=x", "EBBTABLE_INSTANCE=y"}, "ls").mustSucceed(t, "ls with env").stdout, "from-cbt\nfrom-ebbtable\n")

	t.Run("environment without cbtrc", func(t *testing.T) {
		env, _ := cbtEnv(t, "", "BIGTABLE_EMULATOR_HOST="+srv.addr, "EBBTABLE_PROJECT=shared-p", "EBBTABLE_INSTANCE=shared-i")
		wantOutput(t, "ls with EBBTABLE_*", run(t, env, ebbtableBin, "ls").mustSucceed(t, "ls").stdout, "from-cbt\nfrom-ebbtable\n")
		// EBBTABLE_ADDR wins over BIGTABLE_EMULATOR_HOST (a dead loopback port here).
		env, _ = cbtEnv(t, "", "BIGTABLE_EMULATOR_HOST=127.0.0.1:1", "EBBTABLE_ADDR="+srv.addr, "EBBTABLE_PROJECT=shared-p", "EBBTABLE_INSTANCE=shared-i")
		wantOutput(t, "ls with EBBTABLE_ADDR", run(t, env, ebbtableBin, "ls").mustSucceed(t, "ls").stdout, "from-cbt\nfrom-ebbtable\n")
		// Nothing set: the default instance, which is empty.
		env, _ = cbtEnv(t, "", "BIGTABLE_EMULATOR_HOST="+srv.addr)
		wantOutput(t, "ls with defaults", run(t, env, ebbtableBin, "ls").mustSucceed(t, "ls").stdout, "")
	})

	t.Run("endpoints in cbtrc", func(t *testing.T) {
		// cbt lets BIGTABLE_EMULATOR_HOST override data-endpoint and
		// admin-endpoint (dead loopback ports here); so does ebbtable.
		rc := "project = shared-p\ninstance = shared-i\ndata-endpoint = 127.0.0.1:1\nadmin-endpoint = 127.0.0.1:1\n"
		env, cbtPath := cbtEnv(t, rc, "BIGTABLE_EMULATOR_HOST="+srv.addr)
		wantOutput(t, "cbt ls", run(t, env, cbtPath, "ls").mustSucceed(t, "cbt ls").stdout, "from-cbt\nfrom-ebbtable\n")
		wantOutput(t, "ebbtable ls", run(t, env, ebbtableBin, "ls").mustSucceed(t, "ebbtable ls").stdout, "from-cbt\nfrom-ebbtable\n")
		// Without the variable, ebbtable dials the file's data-endpoint.
		rc = fmt.Sprintf("project = shared-p\ninstance = shared-i\ndata-endpoint = %s\n", srv.addr)
		env, _ = cbtEnv(t, rc)
		wantOutput(t, "ebbtable ls via data-endpoint", run(t, env, ebbtableBin, "ls").mustSucceed(t, "ebbtable ls").stdout, "from-cbt\nfrom-ebbtable\n")
		// --addr beats them all.
		wantFailure(t, "ls --addr dead", run(t, env, ebbtableBin, "ls", "--addr", "127.0.0.1:1"), 1, "cannot connect to 127.0.0.1:1")
	})

	t.Run("broken cbtrc", func(t *testing.T) {
		for _, tc := range []struct{ rc, want string }{
			{"project = p\nzone = z\n", `unknown key "zone"`},
			{"project p\n", "is not KEY = VALUE"},
			{"timeout = soon\n", "timeout"},
		} {
			env, cbtPath := cbtEnv(t, tc.rc, "BIGTABLE_EMULATOR_HOST="+srv.addr)
			wantFailure(t, "ebbtable ls with "+tc.rc, run(t, env, ebbtableBin, "ls"), 2, ".cbtrc", tc.want)
			// cbt refuses the same files.
			if r := run(t, env, cbtPath, "ls"); r.code == 0 {
				t.Errorf("cbt accepted the .cbtrc %q that ebbtable refuses", tc.rc)
			}
		}
	})
}

// TestCbtSameOutput compares what cbt and ebbtable print for the commands
// they share (ls, ls TABLE, read, lookup, count), byte for byte, on one
// server (the shared one, in an instance of its own), in a time zone that
// is not UTC.
func TestCbtSameOutput(t *testing.T) {
	t.Parallel()
	addr, inst := sharedServer(t)
	env, cbtPath := cbtEnv(t, "project = same\ninstance = "+inst+"\n", "BIGTABLE_EMULATOR_HOST="+addr, "TZ=Asia/Kolkata")
	cbt := func(args ...string) result {
		t.Helper()
		return run(t, env, cbtPath, args...).mustSucceed(t, "cbt "+strings.Join(args, " "))
	}
	cbt("createtable", "t")
	cbt("createfamily", "t", "cf")
	cbt("createfamily", "t", "b")
	cbt("createfamily", "t", "empty")
	cbt("setgcpolicy", "t", "cf", "maxage=30d", "or", "maxversions=50")
	cbt("setgcpolicy", "t", "b", "maxversions=1")
	cbt("createtable", "other")
	// Fifteen versions of one column (more than a sort's insertion-sort
	// cut-off), several columns and families, a value with quotes and
	// bytes, timestamps with microseconds.
	var versions []string
	for i := 1; i <= 15; i++ {
		versions = append(versions, fmt.Sprintf("cf:v=version %d@%d", i, 1700000000000000+i*1000))
	}
	cbt(append([]string{"set", "t", "row1"}, versions...)...)
	cbt("set", "t", "row1", "cf:a=\"quoted\" \\ and\ttab@1700000000123000", "b:z=zz@1700000000000000", "cf:=empty qualifier@1000")
	cbt("set", "t", "row2", "cf:a=two@2000")
	cbt("set", "t", "rox", "b:k=@3000")
	cbt("set", "t", "s", "cf:a=s@4000")

	for _, args := range [][]string{
		{"ls"},
		{"ls", "t"},
		{"ls", "other"},
		{"read", "t"},
		{"read", "t", "prefix=ro"},
		{"read", "t", "start=row2", "end=s"},
		{"read", "t", "start=row2"},
		{"read", "t", "count=2"},
		{"read", "t", "cells-per-column=2"},
		{"read", "t", "keys-only=true"},
		{"read", "t", "regex=row.*", "cells-per-column=1"},
		{"read", "t", "reversed=true", "count=3"},
		{"read", "t", "columns=cf:a,b:"},
		{"read", "t", "columns=:v", "cells-per-column=2"},
		{"read", "t", "columns=z"},
		{"read", "other"},
		{"lookup", "t", "row1"},
		{"lookup", "t", "row1", "cells-per-column=1"},
		{"lookup", "t", "row1", "app-profile=default", "keys-only=true"},
		{"lookup", "t", "row1", "columns=cf:v"},
		{"lookup", "t", "missing"},
		{"count", "t"},
		{"count", "t", "prefix=ro"},
		{"count", "other"},
	} {
		want := cbt(args...)
		got := run(t, env, ebbtableBin, args...).mustSucceed(t, "ebbtable "+strings.Join(args, " "))
		if got.stdout != want.stdout {
			t.Errorf("ebbtable %s differs from cbt:\n%s\ncbt printed:\n%s", strings.Join(args, " "), got.stdout, want.stdout)
		}
	}
}
