package cli

import (
	"context"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/option"
)

// TestCbtInstancesAndViews drives cbt's instance commands (createinstance,
// listinstances, listclusters, updatecluster, updateappprofile,
// deleteinstance) and its authorized-view reads and writes against a
// server subprocess. cbt 1.23 has no commands for creating authorized
// views or for IAM; the view is created with the official client.
func TestCbtInstancesAndViews(t *testing.T) {
	cbtPath, err := exec.LookPath("cbt")
	if err != nil {
		t.Skip("cbt is not on the PATH")
	}
	t.Parallel()
	srv := startServer(t, t.TempDir())
	env := []string{"BIGTABLE_EMULATOR_HOST=" + srv.addr, "TZ=UTC", "PATH=" + t.TempDir()}
	cbtIn := func(inst string, args ...string) result {
		t.Helper()
		return run(t, env, cbtPath, append([]string{"-project", "p", "-instance", inst}, args...)...)
	}
	cbt := func(args ...string) result {
		t.Helper()
		return cbtIn("i", args...).mustSucceed(t, "cbt "+args[0])
	}

	cbt("createinstance", "made", "Made by cbt", "made-c1", "zone-x", "3", "SSD")
	r := cbt("listinstances")
	if !regexp.MustCompile(`(?m)^made\s+Made by cbt`).MatchString(r.stdout) {
		t.Errorf("cbt listinstances:\n%s", r.stdout)
	}
	r = cbtIn("made", "listclusters").mustSucceed(t, "cbt listclusters")
	if !regexp.MustCompile(`(?m)^made-c1\s+zone-x\s+READY \(3 serve nodes\)`).MatchString(r.stdout) || strings.Contains(r.stdout, "ebbtable-local") {
		t.Errorf("cbt listclusters of a created instance:\n%s", r.stdout)
	}
	cbtIn("made", "updatecluster", "made-c1", "num-nodes=5").mustSucceed(t, "cbt updatecluster")
	r = cbtIn("made", "listclusters").mustSucceed(t, "cbt listclusters")
	if !regexp.MustCompile(`(?m)^made-c1\s+zone-x\s+READY \(5 serve nodes\)`).MatchString(r.stdout) {
		t.Errorf("cbt listclusters after updatecluster:\n%s", r.stdout)
	}
	cbtIn("made", "createappprofile", "made", "p1", "first", "route-any").mustSucceed(t, "cbt createappprofile")
	cbtIn("made", "updateappprofile", "made", "p1", "second", "route-to=made-c1", "transactional-writes=true").mustSucceed(t, "cbt updateappprofile")
	r = cbtIn("made", "getappprofile", "made", "p1").mustSucceed(t, "cbt getappprofile")
	if !strings.Contains(r.stdout, "Description: second") || !regexp.MustCompile(`cluster_id:"made-c1"\s+allow_transactional_writes:true`).MatchString(r.stdout) {
		t.Errorf("cbt getappprofile after update:\n%s", r.stdout)
	}
	cbtIn("made", "createtable", "t").mustSucceed(t, "cbt createtable")
	cbt("deleteinstance", "made")
	r = cbt("listinstances")
	if regexp.MustCompile(`(?m)^made\s`).MatchString(r.stdout) {
		t.Errorf("instance still listed after deleteinstance:\n%s", r.stdout)
	}
	if r := cbtIn("made", "ls"); strings.Contains(r.stdout, "t") {
		t.Errorf("a deleted instance's table is still listed:\n%s", r.stdout)
	}

	// Reads and writes through an authorized view.
	cbt("createtable", "v", "families=f,g")
	cbt("set", "v", "r1", "f:a=in@1000", "g:a=out@1000")
	cbt("set", "v", "x1", "f:a=other@1000")
	ctx := context.Background()
	admin, err := bigtable.NewAdminClient(ctx, "p", "i", option.WithGRPCConn(dialT(t, srv.addr)))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.CreateAuthorizedView(ctx, &bigtable.AuthorizedViewConf{TableID: "v", AuthorizedViewID: "av",
		AuthorizedView: &bigtable.SubsetViewConf{RowPrefixes: [][]byte{[]byte("r")}, FamilySubsets: map[string]bigtable.FamilySubset{"f": {QualifierPrefixes: [][]byte{{}}}}}}); err != nil {
		t.Fatal(err)
	}
	r = cbt("read", "v", "authorized-view=av")
	if !strings.Contains(r.stdout, `"in"`) || strings.Contains(r.stdout, `"out"`) || strings.Contains(r.stdout, "x1") {
		t.Errorf("cbt read through the view:\n%s", r.stdout)
	}
	cbt("set", "v", "r2", "authorized-view=av", "f:b=ok@1000")
	if r := cbtIn("i", "set", "v", "x2", "authorized-view=av", "f:b=no@1000"); r.code == 0 || !strings.Contains(r.stderr, "PermissionDenied") {
		t.Errorf("cbt set outside the view: exit %d\n%s", r.code, r.stderr)
	}
}
