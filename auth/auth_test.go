package auth

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const (
	tokAdmin  = "admin-0123456789abcdef"
	tokReader = "reader-0123456789abcdef"
	tokScoped = "scoped-0123456789abcdef"
	peerCred  = "peer-0123456789abcdef"
)

func writeTokens(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseTokens(t *testing.T) {
	toks, err := ParseTokens(strings.NewReader("# comment\n\n" + tokAdmin + " admin\n" + tokScoped + "   User  i1 i2 # trailing\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) != 2 || toks[0].Role != Admin || !toks[0].Unrestricted() || toks[1].Role != User ||
		strings.Join(toks[1].Instances, ",") != "i1,i2" || toks[1].Line != 4 {
		t.Fatalf("parsed %+v", toks)
	}
	for _, bad := range []string{
		"short admin\n",
		tokAdmin + "\n",
		tokAdmin + " owner\n",
		tokAdmin + " admin\n" + tokAdmin + " reader\n",
	} {
		if _, err := ParseTokens(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: parsed without error", bad)
		}
	}
}

func TestCheck(t *testing.T) {
	a, err := New(Options{TokenFile: writeTokens(t, tokAdmin+" admin\n"+tokReader+" reader\n"+tokScoped+" user i1\n"), PeerCredential: peerCred})
	if err != nil {
		t.Fatal(err)
	}
	const (
		read   = "/google.bigtable.v2.Bigtable/ReadRows"
		write  = "/google.bigtable.v2.Bigtable/MutateRow"
		create = "/google.bigtable.admin.v2.BigtableTableAdmin/CreateTable"
		pull   = "/ebbtable.admin.v1.EbbAdmin/Pull"
		status = "/ebbtable.admin.v1.EbbAdmin/ReplicationStatus"
		health = "/grpc.health.v1.Health/Check"
		newRPC = "/google.bigtable.v2.Bigtable/SomethingNew"
	)
	cases := []struct {
		call Call
		want error
	}{
		{Call{Method: read}, ErrUnauthenticated},
		{Call{Method: read, Bearer: "nope-0123456789abcdef"}, ErrUnauthenticated},
		{Call{Method: read, Bearer: tokReader}, nil},
		{Call{Method: write, Bearer: tokReader}, ErrDenied},
		{Call{Method: write, Bearer: tokScoped}, nil},
		{Call{Method: create, Bearer: tokScoped}, ErrDenied},
		{Call{Method: create, Bearer: tokAdmin}, nil},
		{Call{Method: newRPC, Bearer: tokScoped}, ErrDenied},
		{Call{Method: newRPC, Bearer: tokAdmin}, nil},
		{Call{Method: health}, nil},
		// The peer credential opens peer methods only, and no token
		// opens them.
		{Call{Method: pull, Peer: peerCred}, nil},
		{Call{Method: pull, Bearer: tokAdmin}, ErrDenied},
		{Call{Method: pull}, ErrUnauthenticated},
		{Call{Method: pull, Bearer: peerCred}, ErrUnauthenticated},
		{Call{Method: pull, Peer: tokAdmin}, ErrUnauthenticated},
		{Call{Method: read, Peer: peerCred}, ErrUnauthenticated},
		{Call{Method: status, Peer: peerCred}, nil},
		{Call{Method: status, Bearer: tokReader}, nil},
	}
	for _, c := range cases {
		_, err := a.Check(c.call)
		if !errors.Is(err, c.want) && !(err == nil && c.want == nil) {
			t.Errorf("%+v: got %v, want %v", c.call, err, c.want)
		}
	}
	p, err := a.Check(Call{Method: write, Bearer: tokScoped})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AllowsInstance(write, []string{"i1"}); err != nil {
		t.Errorf("own instance: %v", err)
	}
	if err := p.AllowsInstance(write, []string{"i1", "i2"}); !errors.Is(err, ErrDenied) {
		t.Errorf("other instance: %v", err)
	}
	if err := p.AllowsInstance(write, nil); !errors.Is(err, ErrDenied) {
		t.Errorf("no instance: %v", err)
	}
}

func TestReloadKeepsOldTokensOnError(t *testing.T) {
	path := writeTokens(t, tokAdmin+" admin\n")
	a, err := New(Options{TokenFile: path})
	if err != nil {
		t.Fatal(err)
	}
	const m = "/google.bigtable.v2.Bigtable/ReadRows"
	if err := os.WriteFile(path, []byte(tokReader+" reader\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Check(Call{Method: m, Bearer: tokAdmin}); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("removed token still works: %v", err)
	}
	if _, err := a.Check(Call{Method: m, Bearer: tokReader}); err != nil {
		t.Errorf("added token: %v", err)
	}
	if err := os.WriteFile(path, []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err == nil {
		t.Fatal("bad file reloaded")
	}
	if _, err := a.Check(Call{Method: m, Bearer: tokReader}); err != nil {
		t.Errorf("a failed reload dropped the tokens: %v", err)
	}
}

func TestAuthOff(t *testing.T) {
	a, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"/google.bigtable.v2.Bigtable/MutateRow", "/ebbtable.admin.v1.EbbAdmin/Join"} {
		if _, err := a.Check(Call{Method: m}); err != nil {
			t.Errorf("%s with authentication off: %v", m, err)
		}
	}
	// A peer credential alone closes the peer methods only.
	a, _ = New(Options{PeerCredential: peerCred})
	if _, err := a.Check(Call{Method: "/ebbtable.admin.v1.EbbAdmin/Join"}); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("Join without the peer credential: %v", err)
	}
	if _, err := a.Check(Call{Method: "/google.bigtable.v2.Bigtable/MutateRow"}); err != nil {
		t.Errorf("MutateRow with tokens off: %v", err)
	}
}

func TestTokenMembers(t *testing.T) {
	toks, err := ParseTokens(strings.NewReader(tokAdmin + " admin i1 as=user:a@example.com as=group:ops@example.com i2\n" + tokReader + " reader\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := toks[0].Members; !slices.Equal(got, []string{"user:a@example.com", "group:ops@example.com"}) || !slices.Equal(toks[0].Instances, []string{"i1", "i2"}) {
		t.Errorf("members %v, instances %v", got, toks[0].Instances)
	}
	if got := toks[1].Members; len(got) != 1 || got[0] != TokenMember(tokReader) || len(got[0]) != len("token:")+12 || strings.Contains(got[0], tokReader[:6]) {
		t.Errorf("default member %v", got)
	}
	for _, bad := range []string{"as=alice", "as=user:", "as=allUsers", "as=domain:example.com"} {
		if _, err := ParseTokens(strings.NewReader(tokAdmin + " admin " + bad + "\n")); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestIAMRolesAndMembers(t *testing.T) {
	for _, c := range []struct {
		role, perm string
		want       bool
	}{
		{"roles/bigtable.reader", "bigtable.tables.readRows", true},
		{"roles/bigtable.reader", "bigtable.authorizedViews.readRows", true},
		{"roles/bigtable.reader", "bigtable.tables.mutateRows", false},
		{"roles/bigtable.user", "bigtable.tables.mutateRows", true},
		{"roles/bigtable.user", "bigtable.tables.create", false},
		{"roles/bigtable.viewer", "bigtable.tables.get", true},
		{"roles/bigtable.viewer", "bigtable.tables.readRows", false},
		{"roles/viewer", "bigtable.instances.list", true},
		{"roles/bigtable.admin", "bigtable.tables.setIamPolicy", true},
		{"roles/owner", "bigtable.backups.setIamPolicy", true},
		{"roles/editor", "bigtable.tables.delete", true},
		{"roles/editor", "bigtable.tables.setIamPolicy", false},
		{"roles/custom.mine", "bigtable.tables.readRows", false},
		{"roles/bigtable.admin", "bigtable.tables.noSuchVerb", false},
	} {
		if got := RoleHolds(c.role, c.perm); got != c.want {
			t.Errorf("%s holds %s: %v", c.role, c.perm, got)
		}
	}
	if got := PermissionFor("bigtable.tables.readRows", "authorizedViews"); got != "bigtable.authorizedViews.readRows" {
		t.Errorf("view read: %s", got)
	}
	if got := PermissionFor("bigtable.tables.create", "instances"); got != "bigtable.tables.create" {
		t.Errorf("create on an instance: %s", got)
	}
	alice := []string{"user:alice@example.com", "group:eng@example.com"}
	for m, want := range map[string]bool{
		"allUsers": true, "allAuthenticatedUsers": true, "user:alice@example.com": true, "group:eng@example.com": true,
		"domain:example.com": true, "domain:other.com": false, "user:bob@example.com": false, "user:alice@example.co": false,
	} {
		if got := Matches(m, alice); got != want {
			t.Errorf("%s matches alice: %v", m, got)
		}
	}
	if Matches("domain:example.com", []string{"token:0123456789ab"}) {
		t.Error("a token member is in a domain")
	}
	b := []Binding{{Role: "roles/bigtable.admin", Members: []string{"user:alice@example.com"}, Conditional: true},
		{Role: "roles/bigtable.reader", Members: []string{"domain:example.com"}}}
	if !Grants(b, alice, "bigtable.tables.readRows") || Grants(b, alice, "bigtable.tables.mutateRows") {
		t.Error("a conditional binding granted, or the domain binding did not")
	}
}
