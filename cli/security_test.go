package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ebbtable/ebbtable/internal/testkit"
)

const (
	adminToken  = "admin-token-0123456789a"
	readerToken = "reader-token-0123456789"
)

// secureServer starts `ebbtable serve` with TLS (mutual when mtls) and a
// token file holding an admin and a reader token.
func secureServer(t *testing.T, mtls bool, extra ...string) (*serverProc, testkit.Certs, string) {
	t.Helper()
	dir := t.TempDir()
	certs, err := testkit.NewCerts(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte(adminToken+" admin\n"+readerToken+" reader\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"serve", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", filepath.Join(dir, "data"),
		"--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey, "--auth-token-file", tokens}
	if mtls {
		args = append(args, "--tls-client-ca", certs.CA)
	}
	return startServe(t, append(args, extra...)...), certs, tokens
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCbtOverTLSWithToken drives the real cbt against a server with TLS and
// tokens: -data-endpoint, -admin-endpoint, -cert-file and -access-token.
func TestCbtOverTLSWithToken(t *testing.T) {
	cbtPath, err := exec.LookPath("cbt")
	if err != nil {
		t.Skip("cbt is not on the PATH")
	}
	t.Parallel()
	srv, certs, _ := secureServer(t, false)
	env := []string{"TZ=UTC", "PATH=" + t.TempDir()}
	cbt := func(token string, args ...string) result {
		t.Helper()
		base := []string{"-project", "p", "-instance", "i", "-data-endpoint", srv.addr, "-admin-endpoint", srv.addr, "-cert-file", certs.CA}
		if token != "" {
			base = append(base, "-access-token", token)
		}
		return run(t, env, cbtPath, append(base, args...)...)
	}
	cbt(adminToken, "createtable", "t").mustSucceed(t, "cbt createtable")
	cbt(adminToken, "createfamily", "t", "cf").mustSucceed(t, "cbt createfamily")
	cbt(adminToken, "set", "t", "r1", "cf:c=v1@1000000").mustSucceed(t, "cbt set")
	r := cbt(readerToken, "read", "t").mustSucceed(t, "cbt read")
	if !strings.Contains(r.stdout, `"v1"`) {
		t.Errorf("cbt read over TLS:\n%s", r.stdout)
	}
	if r := cbt(readerToken, "set", "t", "r2", "cf:c=v2"); r.code == 0 || !strings.Contains(r.stderr, "PermissionDenied") {
		t.Errorf("cbt set with a reader token: exit %d\n%s", r.code, r.stderr)
	}
	// A token the server does not know is refused. (cbt with no token at
	// all would look for Google's default credentials: a call to the
	// metadata server, off this machine.)
	if r := cbt("not-a-known-token-000000", "ls"); r.code == 0 || !strings.Contains(r.stderr, "Unauthenticated") {
		t.Errorf("cbt ls with an unknown token: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestCLIOverMutualTLSWithToken: the ebbtable CLI with --tls-ca,
// --tls-cert/--tls-key and --token-file (or $EBBTABLE_TOKEN).
func TestCLIOverMutualTLSWithToken(t *testing.T) {
	t.Parallel()
	srv, certs, _ := secureServer(t, true)
	tls := []string{"--addr", srv.addr, "--tls-ca", certs.CA, "--tls-cert", certs.ClientCert, "--tls-key", certs.ClientKey}
	ebbtable(t, append([]string{"createtable", "t", "cf"}, append(tls, "--token-file", writeFile(t, adminToken+"\n"))...)...).mustSucceed(t, "createtable")
	r := run(t, []string{"EBBTABLE_TOKEN=" + readerToken}, ebbtableBin, append([]string{"ls"}, tls...)...).mustSucceed(t, "ls with $EBBTABLE_TOKEN")
	if strings.TrimSpace(r.stdout) != "t" {
		t.Errorf("ls: %q", r.stdout)
	}
	if r := ebbtable(t, append([]string{"ls"}, tls...)...); r.code == 0 || !strings.Contains(r.stderr, "Unauthenticated") {
		t.Errorf("ls without a token: exit %d\n%s", r.code, r.stderr)
	}
	// No client certificate: the handshake fails.
	if r := ebbtable(t, "ls", "--addr", srv.addr, "--tls-ca", certs.CA, "--token-file", writeFile(t, adminToken+"\n"), "--timeout", "5s"); r.code == 0 {
		t.Errorf("ls without a client certificate succeeded")
	}
	// Plaintext against a TLS port fails too.
	if r := run(t, []string{"EBBTABLE_TOKEN=" + adminToken}, ebbtableBin, "ls", "--addr", srv.addr, "--timeout", "5s"); r.code == 0 {
		t.Errorf("plaintext ls against TLS succeeded")
	}
}

// TestSIGHUPReloadsTokens: SIGHUP re-reads the token file.
func TestSIGHUPReloadsTokens(t *testing.T) {
	t.Parallel()
	srv, certs, tokens := secureServer(t, false)
	ls := func(token string) result {
		return run(t, []string{"EBBTABLE_TOKEN=" + token}, ebbtableBin, "ls", "--addr", srv.addr, "--tls-ca", certs.CA)
	}
	ls(adminToken).mustSucceed(t, "ls before the reload")
	const newToken = "new-admin-token-0123456"
	if err := os.WriteFile(tokens, []byte(newToken+" admin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the new token working", processTimeout, func() (bool, string) {
		return ls(newToken).code == 0, srv.stderr.String()
	})
	if r := ls(adminToken); r.code == 0 {
		t.Error("the removed token still works")
	}
	if srv.terminate(t) != 0 {
		t.Errorf("serve exited badly after SIGHUP:\n%s", srv.stderr.String())
	}
}

// TestServeRefusesExposedPlaintext: a non-loopback --addr without TLS and
// tokens is refused before anything listens.
func TestServeRefusesExposedPlaintext(t *testing.T) {
	t.Parallel()
	r := ebbtable(t, "serve", "--addr", "0.0.0.0:0", "--http-addr", "off", "--data", t.TempDir())
	if r.code == 0 || !strings.Contains(r.stderr, "--insecure") || !strings.Contains(r.stderr, "without TLS and tokens") {
		t.Fatalf("exposed plaintext serve: exit %d\n%s", r.code, r.stderr)
	}
}
