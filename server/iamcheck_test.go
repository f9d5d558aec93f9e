package server

import (
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/iam"
	"github.com/ebbtable/ebbtable/auth"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestEveryMethodHasAPermission goes over every method the server
// registers: each has an IAM permission listed next to its role (empty
// only where IAM does not apply: open methods, cluster-to-cluster calls,
// connection warm-up, TestIamPermissions), and the predefined role named like the method's
// token role holds it, so a binding of that role lets the call through.
func TestEveryMethodHasAPermission(t *testing.T) {
	t.Parallel()
	tokens, peer := securityFiles(t)
	srv := startSecure(t, SecurityOptions{TokenFile: tokens, PeerCredentialFile: peer})
	n := 0
	for svc, info := range srv.grpc.GetServiceInfo() {
		for _, m := range info.Methods {
			full := "/" + svc + "/" + m.Name
			n++
			need := auth.Need(full)
			perm, listed := auth.Permission(full)
			if !listed {
				t.Errorf("%s has no IAM permission in auth/permissions.go", full)
				continue
			}
			exempt := need.Open || need.Role == auth.None || slices.Contains([]string{"TestIamPermissions", "PingAndWarm", "GetClientConfiguration"}, m.Name)
			if exempt != (perm == "") {
				t.Errorf("%s: permission %q (open %v, peer-only %v)", full, perm, need.Open, need.Role == auth.None)
				continue
			}
			if perm == "" {
				continue
			}
			if !strings.HasPrefix(perm, "bigtable.") || strings.Count(perm, ".") != 2 {
				t.Errorf("%s: %q is not bigtable.KIND.VERB", full, perm)
			}
			role := "roles/bigtable." + need.Role.String()
			if !auth.RoleHolds(role, perm) || !auth.TokenHolds(need.Role, perm) {
				t.Errorf("%s: %s does not hold %s", full, role, perm)
			}
		}
	}
	if n < 80 {
		t.Fatalf("only %d methods registered", n)
	}
}

// IAM test tokens: each names its member, but one, which is token:HASH.
const (
	tokRoot  = "root-admin-token-0123456"
	tokAlice = "alice-user-token-0123456"
	tokBob   = "bob-user-token-012345678"
	tokCarol = "carol-reader-token-01234"
)

// iamEnv is a server with TLS and the IAM tokens, a table t1 and a table
// t2 (family f, row r written in each), and the official clients of each
// caller, connected before any policy exists.
type iamEnv struct {
	ctx     context.Context
	srv     *Server
	tls     *tls.Config
	root    *bigtable.AdminClient
	inst    *bigtable.InstanceAdminClient
	data    map[string]*bigtable.Client
	admin   map[string]*bigtable.AdminClient
	carolID string
}

func newIAMEnv(t *testing.T, more ...envOption) *iamEnv {
	t.Helper()
	certs := newCerts(t, "iam")
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	body := tokRoot + " admin as=user:root@example.com\n" +
		tokAlice + " user as=user:alice@example.com\n" +
		tokBob + " user as=user:bob@example.com as=group:eng@example.com\n" +
		tokCarol + " reader\n"
	if err := os.WriteFile(tokens, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startSecure(t, SecurityOptions{TLSCert: certs.ServerCert, TLSKey: certs.ServerKey, TokenFile: tokens}, more...)
	cfg := &tls.Config{RootCAs: caPool(t, certs.CA)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	e := &iamEnv{ctx: ctx, srv: srv, tls: cfg, data: map[string]*bigtable.Client{}, admin: map[string]*bigtable.AdminClient{}, carolID: auth.TokenMember(tokCarol)}
	for _, tok := range []string{tokRoot, tokAlice, tokBob, tokCarol} {
		e.data[tok], e.admin[tok] = mustClients(t, srv.Addr(), cfg, tok)
	}
	e.root = e.admin[tokRoot]
	inst, err := bigtable.NewInstanceAdminClient(ctx, testProject, // dialled here: see tlsClients
		option.WithGRPCConn(dialTLS(t, srv.Addr(), cfg, tokRoot)), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Close() })
	e.inst = inst
	for _, tbl := range []string{"t1", "t2"} {
		if err := e.root.CreateTable(ctx, tbl); err != nil {
			t.Fatal(err)
		}
		if err := e.root.CreateColumnFamily(ctx, tbl, "f"); err != nil {
			t.Fatal(err)
		}
		if err := e.write(tokRoot, tbl); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e *iamEnv) write(tok, tbl string) error {
	m := bigtable.NewMutation()
	m.Set("f", "c", 1000, []byte("v"))
	return e.data[tok].Open(tbl).Apply(e.ctx, "r", m)
}

func (e *iamEnv) read(tok, tbl string) error {
	row, err := e.data[tok].Open(tbl).ReadRow(e.ctx, "r")
	if err == nil && len(row["f"]) != 1 {
		return status.Errorf(codes.Internal, "read %v", row)
	}
	return err
}

// set replaces the policy of h with bindings (role → members).
func (e *iamEnv) set(t *testing.T, h *iam.Handle, bindings map[iam.RoleName][]string) {
	t.Helper()
	p, err := h.Policy(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range p.Roles() {
		for _, m := range p.Members(r) {
			p.Remove(m, r)
		}
	}
	for r, ms := range bindings {
		for _, m := range ms {
			p.Add(m, r)
		}
	}
	if err := h.SetPolicy(e.ctx, p); err != nil {
		t.Fatal(err)
	}
}

const (
	btReader = iam.RoleName("roles/bigtable.reader")
	btUser   = iam.RoleName("roles/bigtable.user")
	btAdmin  = iam.RoleName("roles/bigtable.admin")
)

func wantDenied(t *testing.T, what string, err error, perm string) {
	t.Helper()
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), perm) {
		t.Errorf("%s: %v, want PermissionDenied naming %s", what, err, perm)
	}
}

func wantOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

// TestIAMTablePolicies: a member allowed on one table and not another; a
// role narrower than the token's; a policy replaced to remove access, and
// emptied to give the decision back to the token's role.
func TestIAMTablePolicies(t *testing.T) {
	t.Parallel()
	e := newIAMEnv(t)
	// No policy anywhere: the token's role decides.
	wantOK(t, "alice writes t1 with no policy", e.write(tokAlice, "t1"))
	wantOK(t, "bob reads t2 with no policy", e.read(tokBob, "t2"))

	e.set(t, e.root.TableIAM("t1"), map[iam.RoleName][]string{btReader: {"user:alice@example.com"}, btAdmin: {"user:root@example.com"}})
	wantOK(t, "alice reads t1", e.read(tokAlice, "t1"))
	wantDenied(t, "alice writes t1 as a bigtable.reader", e.write(tokAlice, "t1"), "bigtable.tables.mutateRows")
	wantDenied(t, "bob reads t1", e.read(tokBob, "t1"), "bigtable.tables.readRows")
	wantOK(t, "bob writes t2", e.write(tokBob, "t2"))
	// The token's role is a ceiling: bigtable.admin on t1 does not let a
	// user token drop t1.
	e.set(t, e.root.TableIAM("t2"), map[iam.RoleName][]string{btAdmin: {"user:bob@example.com", "user:root@example.com"}})
	wantOK(t, "bob writes t2 as bigtable.admin", e.write(tokBob, "t2"))
	if err := e.admin[tokBob].DeleteTable(e.ctx, "t2"); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "needs role admin") {
		t.Errorf("bob deletes t2 with a user token: %v, want the token's role to refuse", err)
	}
	wantDenied(t, "alice reads t2", e.read(tokAlice, "t2"), "bigtable.tables.readRows")
	wantDenied(t, "carol reads t2", e.read(tokCarol, "t2"), "bigtable.tables.readRows")
	// Removing access: the policy replaced by one without alice.
	e.set(t, e.root.TableIAM("t1"), map[iam.RoleName][]string{btUser: {"group:eng@example.com"}, btAdmin: {"user:root@example.com"}})
	wantDenied(t, "alice reads t1 after the policy dropped her", e.read(tokAlice, "t1"), "bigtable.tables.readRows")
	wantOK(t, "bob writes t1 through group:eng", e.write(tokBob, "t1"))
	// Admin calls on the table go through its policy too.
	if _, err := e.admin[tokAlice].TableInfo(e.ctx, "t1"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("alice gets t1's schema: %v, want PermissionDenied", err)
	}
	if _, err := e.root.TableInfo(e.ctx, "t1"); err != nil {
		t.Errorf("root gets t1's schema: %v", err)
	}
	// A policy that would lock its setter out is refused, and nothing
	// changes.
	h := e.root.TableIAM("t1")
	p, err := h.Policy(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.Remove("user:root@example.com", btAdmin)
	p.Add("user:root@example.com", btUser)
	if err := h.SetPolicy(e.ctx, p); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "bigtable.tables.setIamPolicy") {
		t.Errorf("root drops its own admin binding: %v, want FailedPrecondition", err)
	}
	if p, err = h.Policy(e.ctx); err != nil || len(p.Members(btAdmin)) != 1 {
		t.Errorf("the refused policy changed something: %v %v", p, err)
	}
	// A policy with no bindings governs nothing.
	e.set(t, e.root.TableIAM("t1"), nil)
	wantOK(t, "alice writes t1 after the policy was emptied", e.write(tokAlice, "t1"))
}

// TestIAMInstancePolicyInherits: a binding on the instance applies to its
// tables; a table's own binding adds to it; instance-level calls
// (ListTables) follow the instance's policy.
func TestIAMInstancePolicyInherits(t *testing.T) {
	t.Parallel()
	e := newIAMEnv(t)
	e.set(t, e.inst.InstanceIAM(testInstance), map[iam.RoleName][]string{
		btUser: {"user:alice@example.com"}, btAdmin: {"user:root@example.com"}})
	for _, tbl := range []string{"t1", "t2"} {
		wantOK(t, "alice writes "+tbl+" through the instance binding", e.write(tokAlice, tbl))
		wantDenied(t, "bob reads "+tbl, e.read(tokBob, tbl), "bigtable.tables.readRows")
	}
	if _, err := e.admin[tokBob].Tables(e.ctx); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "bigtable.tables.list") {
		t.Errorf("bob lists tables: %v", err)
	}
	if _, err := e.admin[tokAlice].Tables(e.ctx); err != nil {
		t.Errorf("alice lists tables: %v", err)
	}
	// A table binding adds bob on t2 only.
	e.set(t, e.root.TableIAM("t2"), map[iam.RoleName][]string{btReader: {"user:bob@example.com"}})
	wantOK(t, "bob reads t2 through its own binding", e.read(tokBob, "t2"))
	// A member bound on a table only still connects (PingAndWarm needs no
	// permission) and reads that table.
	fresh, _ := mustClients(t, e.srv.Addr(), e.tls, tokBob)
	if _, err := fresh.Open("t2").ReadRow(e.ctx, "r"); err != nil {
		t.Errorf("bob's new client reads t2: %v", err)
	}
	wantDenied(t, "bob reads t1", e.read(tokBob, "t1"), "bigtable.tables.readRows")
	wantOK(t, "alice still writes t2 through the instance", e.write(tokAlice, "t2"))
	// Root, bound on the instance, may drop the instance's policy.
	e.set(t, e.inst.InstanceIAM(testInstance), nil)
	wantOK(t, "bob reads t1 once the instance's policy is empty", e.read(tokBob, "t1"))
}

// TestIAMAllUsersAndTokenMembers: allUsers grants every token; a token
// line without as= is the member token:HASH; a binding on an authorized
// view lets its member read through the view and not the table.
func TestIAMAllUsersAndTokenMembers(t *testing.T) {
	t.Parallel()
	e := newIAMEnv(t)
	e.set(t, e.root.TableIAM("t1"), map[iam.RoleName][]string{btReader: {"allUsers"}, btAdmin: {"user:root@example.com"}})
	for _, tok := range []string{tokAlice, tokBob, tokCarol} {
		wantOK(t, "allUsers: read t1", e.read(tok, "t1"))
	}
	wantDenied(t, "alice writes t1 (allUsers is a reader)", e.write(tokAlice, "t1"), "bigtable.tables.mutateRows")
	// Carol's token names no member: she is token:HASH.
	e.set(t, e.root.TableIAM("t2"), map[iam.RoleName][]string{btReader: {e.carolID}, btAdmin: {"user:root@example.com"}})
	wantOK(t, "carol reads t2 as "+e.carolID, e.read(tokCarol, "t2"))
	wantDenied(t, "alice reads t2", e.read(tokAlice, "t2"), "bigtable.tables.readRows")

	if err := e.root.CreateAuthorizedView(e.ctx, &bigtable.AuthorizedViewConf{TableID: "t2", AuthorizedViewID: "v",
		AuthorizedView: &bigtable.SubsetViewConf{RowPrefixes: [][]byte{[]byte("r")}, FamilySubsets: map[string]bigtable.FamilySubset{"f": {QualifierPrefixes: [][]byte{[]byte("")}}}}}); err != nil {
		t.Fatal(err)
	}
	e.set(t, e.root.AuthorizedViewIAM("t2", "v"), map[iam.RoleName][]string{btReader: {"user:alice@example.com"}})
	row, err := e.data[tokAlice].OpenAuthorizedView("t2", "v").ReadRow(e.ctx, "r")
	if err != nil || len(row["f"]) != 1 {
		t.Errorf("alice reads through the view: %v %v", row, err)
	}
	m := bigtable.NewMutation()
	m.Set("f", "c", 2000, []byte("w"))
	wantDenied(t, "alice writes through the view", e.data[tokAlice].OpenAuthorizedView("t2", "v").Apply(e.ctx, "r", m), "bigtable.authorizedViews.mutateRows")
	wantDenied(t, "alice reads t2 itself", e.read(tokAlice, "t2"), "bigtable.tables.readRows")
}

// TestIamPermissionsAnswerForTheCaller: with tokens on, TestIamPermissions
// answers what the caller holds: what its token's role reaches and, where
// a policy governs the resource, what the policy grants its members.
func TestIamPermissionsAnswerForTheCaller(t *testing.T) {
	t.Parallel()
	e := newIAMEnv(t)
	asked := []string{"bigtable.tables.readRows", "bigtable.tables.mutateRows", "bigtable.tables.get", "bigtable.tables.delete", "bigtable.tables.noSuchVerb"}
	check := func(tok, tbl string, want ...string) {
		t.Helper()
		got, err := e.admin[tok].TableIAM(tbl).TestPermissions(e.ctx, asked)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s on %s: %v %v, want %v", tok, tbl, got, err, want)
		}
	}
	// No policy: the token's role alone.
	check(tokAlice, "t1", "bigtable.tables.readRows", "bigtable.tables.mutateRows", "bigtable.tables.get")
	check(tokCarol, "t1", "bigtable.tables.readRows", "bigtable.tables.get")
	check(tokRoot, "t1", "bigtable.tables.readRows", "bigtable.tables.mutateRows", "bigtable.tables.get", "bigtable.tables.delete")
	e.set(t, e.root.TableIAM("t1"), map[iam.RoleName][]string{btReader: {"user:alice@example.com"}, btAdmin: {"user:root@example.com"}})
	check(tokAlice, "t1", "bigtable.tables.readRows", "bigtable.tables.get")
	check(tokBob, "t1")
	check(tokRoot, "t1", "bigtable.tables.readRows", "bigtable.tables.mutateRows", "bigtable.tables.get", "bigtable.tables.delete")
	check(tokBob, "t2", "bigtable.tables.readRows", "bigtable.tables.mutateRows", "bigtable.tables.get")
	// An instance binding reaches the table.
	e.set(t, e.inst.InstanceIAM(testInstance), map[iam.RoleName][]string{iam.Viewer: {"user:bob@example.com"}, btAdmin: {"user:root@example.com"}})
	check(tokBob, "t2", "bigtable.tables.get")
	check(tokBob, "t1", "bigtable.tables.get")
	check(tokAlice, "t1", "bigtable.tables.readRows", "bigtable.tables.get")
}

// TestIAMOnTheHTTPPort: the web console shows every table, so where IAM
// policies exist a token must be granted on every resource they govern.
func TestIAMOnTheHTTPPort(t *testing.T) {
	t.Parallel()
	e := newIAMEnv(t, func(o *Options) { o.HTTPAddr = "127.0.0.1:0" })
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: e.tls}, Timeout: 10 * time.Second}
	get := func(method, tok string) int {
		t.Helper()
		req, err := http.NewRequest(method, "https://"+e.srv.HTTPAddr()+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get("GET", tokBob); got == http.StatusForbidden || got == http.StatusUnauthorized {
		t.Errorf("bob with no policy anywhere: %d", got)
	}
	e.set(t, e.root.TableIAM("t1"), map[iam.RoleName][]string{btReader: {"user:alice@example.com"}, btAdmin: {"user:root@example.com"}})
	if got := get("GET", tokBob); got != http.StatusForbidden {
		t.Errorf("bob, not in t1's policy: %d, want 403", got)
	}
	if got := get("GET", tokAlice); got == http.StatusForbidden || got == http.StatusUnauthorized {
		t.Errorf("alice, a reader of t1: %d", got)
	}
	if got := get("POST", tokRoot); got == http.StatusForbidden || got == http.StatusUnauthorized {
		t.Errorf("root, an admin of t1: %d", got)
	}
}
