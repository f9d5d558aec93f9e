package cli

import (
	"os/exec"
	"regexp"
	"testing"
	"time"
)

// TestCbt drives the real cbt tool against a server subprocess (the shared
// one, in an instance of its own), the way users point it at an emulator.
func TestCbt(t *testing.T) {
	cbtPath, err := exec.LookPath("cbt")
	if err != nil {
		t.Skip("cbt is not on the PATH")
	}
	t.Parallel()
	addr, inst := sharedServer(t)
	// TZ=UTC: cbt prints timestamps in local time. An empty PATH: without
	// -creds, cbt runs `gcloud config config-helper` for defaults, which
	// takes seconds and reads the developer's gcloud configuration; with no
	// gcloud to run it goes straight to the emulator.
	env := []string{"BIGTABLE_EMULATOR_HOST=" + addr, "TZ=UTC", "PATH=" + t.TempDir()}
	cbt := func(args ...string) result {
		t.Helper()
		return run(t, env, cbtPath, append([]string{"-project", "p", "-instance", inst}, args...)...).mustSucceed(t, "cbt "+args[0])
	}

	cbt("createtable", "t")
	cbt("createfamily", "t", "cf")
	cbt("setgcpolicy", "t", "cf", "maxversions=2")
	// Explicit timestamps (microseconds) keep the versions apart.
	cbt("set", "t", "r1", "cf:c=v1@1000000", "cf:d=w@1000000")
	cbt("set", "t", "r1", "cf:c=v2@2000000")
	cbt("set", "t", "r1", "cf:c=v3@3000000")
	cbt("set", "t", "r2", "cf:c=only@1000000")

	// maxversions=2 hides the oldest version of r1's cf:c at once (the
	// default --gc-visibility hidden).
	r := cbt("read", "t")
	wantOutput(t, "cbt read", r.stdout, `----------------------------------------
r1
  cf:c                                     @ 1970/01/01-00:00:03.000000
    "v3"
  cf:c                                     @ 1970/01/01-00:00:02.000000
    "v2"
  cf:d                                     @ 1970/01/01-00:00:01.000000
    "w"

----------------------------------------
r2
  cf:c                                     @ 1970/01/01-00:00:01.000000
    "only"

`)
	r = cbt("ls")
	wantOutput(t, "cbt ls", r.stdout, "t\n")
	r = cbt("ls", "t")
	if !regexp.MustCompile(`(?m)^cf\s+versions\(\) > 2\s`).MatchString(r.stdout) {
		t.Errorf("cbt ls t does not show cf with versions() > 2:\n%s", r.stdout)
	}
	cbt("deletetable", "t")
	r = cbt("ls")
	wantOutput(t, "cbt ls after deletetable", r.stdout, "")
}

// TestCbtClustersAndProfiles drives cbt's instance admin commands: clusters
// and app profiles are recorded and listed (no replication yet).
func TestCbtClustersAndProfiles(t *testing.T) {
	cbtPath, err := exec.LookPath("cbt")
	if err != nil {
		t.Skip("cbt is not on the PATH")
	}
	t.Parallel()
	srv := startServer(t, t.TempDir())
	env := []string{"BIGTABLE_EMULATOR_HOST=" + srv.addr, "TZ=UTC", "PATH=" + t.TempDir()}
	cbt := func(args ...string) result {
		t.Helper()
		return run(t, env, cbtPath, append([]string{"-project", "p", "-instance", "i"}, args...)...).mustSucceed(t, "cbt "+args[0])
	}
	cbt("createtable", "t")
	// createcluster waits until a process serving cluster b joins.
	created := make(chan result, 1)
	go func() {
		created <- run(t, env, cbtPath, "-project", "p", "-instance", "i", "createcluster", "b", "zone-b", "1", "SSD")
	}()
	time.Sleep(200 * time.Millisecond)
	select {
	case r := <-created:
		t.Fatalf("cbt createcluster returned before b joined: %+v", r)
	default:
	}
	b := startServe(t, "serve", "--cluster-id", "b", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", t.TempDir(), "--join", srv.addr)
	(<-created).mustSucceed(t, "cbt createcluster")
	cbt("updatecluster", "b", "num-nodes=3")
	r := cbt("listclusters")
	if !regexp.MustCompile(`(?m)^ebbtable\s+ebbtable-local\s+READY`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^b\s+zone-b\s+READY \(3 serve nodes\)`).MatchString(r.stdout) {
		t.Errorf("cbt listclusters:\n%s", r.stdout)
	}
	cbt("createappprofile", "i", "single", "one cluster", "route-to=b", "transactional-writes=true")
	cbt("createappprofile", "i", "multi", "any cluster", "route-any")
	r = cbt("getappprofile", "i", "single")
	if !regexp.MustCompile(`allow_transactional_writes:\s*true`).MatchString(r.stdout) {
		t.Errorf("cbt getappprofile single:\n%s", r.stdout)
	}
	r = cbt("listappprofile", "i")
	for _, p := range []string{"default", "single", "multi"} {
		if !regexp.MustCompile(`appProfiles/` + p + `\s`).MatchString(r.stdout) {
			t.Errorf("cbt listappprofile lacks %s:\n%s", p, r.stdout)
		}
	}
	cbt("deleteappprofile", "i", "single")
	b.terminate(t)
	cbt("deletecluster", "b")
	r = cbt("listclusters")
	if regexp.MustCompile(`(?m)^b\s`).MatchString(r.stdout) {
		t.Errorf("cluster b still listed:\n%s", r.stdout)
	}
}
