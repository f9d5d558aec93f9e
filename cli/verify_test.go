package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ebbtable/ebbtable/internal/testkit"
)

// TestVerify runs `ebbtable verify` on a server's data directory: refused
// while the server runs, clean once it stopped, and exit 1 naming the file
// after a byte of it is flipped.
func TestVerify(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServer(t, dir)
	client, admin := officialClients(t, srv.addr)
	testkit.WriteFixture(t, client, admin)

	r := ebbtable(t, "verify", "--data", dir)
	if r.code != 2 || !strings.Contains(r.stderr, "in use") || !strings.Contains(r.stderr, "stop it first") {
		t.Errorf("verify with the server running: exit %d, stderr %q; want 2 and a refusal", r.code, r.stderr)
	}
	if code := srv.terminate(t); code != 0 {
		t.Fatalf("serve exited %d; stderr:\n%s", code, srv.stderr.String())
	}

	r = ebbtable(t, "verify", "--data", dir).mustSucceed(t, "verify of a healthy directory")
	if !strings.Contains(r.stdout, "checked ") || !strings.Contains(r.stdout, ": 0 damaged") {
		t.Errorf("verify output lacks its summary:\n%s", r.stdout)
	}

	// Damage the largest data file (an SSTable if the server flushed one,
	// else the WAL) in its first half: a region a clean stop left synced.
	var victim string
	var size int64
	for _, pat := range []string{"*.sst", "*.log"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		for _, p := range m {
			if st, err := os.Stat(p); err == nil && st.Size() > size {
				victim, size = p, st.Size()
			}
		}
		if victim != "" {
			break
		}
	}
	if victim == "" {
		t.Fatal("no SSTable or WAL in the data directory")
	}
	b, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	b[20] ^= 0x40
	if err := os.WriteFile(victim, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r = ebbtable(t, "verify", "--data", dir)
	if r.code != 1 || !strings.Contains(r.stdout, "DAMAGED "+victim) || !strings.Contains(r.stdout, ": 1 damaged") || !strings.Contains(r.stderr, "1 damaged file") {
		t.Errorf("verify after a flip in %s: exit %d\nstdout:\n%s\nstderr:\n%s", victim, r.code, r.stdout, r.stderr)
	}

	r = ebbtable(t, "verify")
	if r.code != 2 || !strings.Contains(r.stderr, "--data is required") {
		t.Errorf("verify without --data: exit %d, stderr %q", r.code, r.stderr)
	}
}
