package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/iam/apiv1/iampb"
	"github.com/ebbtable/ebbtable/auth"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestScaleOutTableIAM: in cluster mode a table's IAM policy is one for
// every node. Set through n1, it is enforced by n2 (a member it leaves
// out is refused, one it binds passes), read through n3 with its etag,
// replaced only from that etag, and a table made again under the name
// starts without it.
func TestScaleOutTableIAM(t *testing.T) {
	t.Parallel()
	tokens, peer := securityFiles(t)
	dir := t.TempDir()
	cred := filepath.Join(dir, "node")
	if err := os.WriteFile(cred, []byte("node-secret-0123456789abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	etcd, prefix := sharedEtcd.Start(t)
	shared := t.TempDir()
	nodes := map[string]*Server{}
	for _, id := range []string{"n1", "n2", "n3"} {
		srv, err := New(Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: filepath.Join(dir, id),
			Security: SecurityOptions{TokenFile: tokens, PeerCredentialFile: peer, NodeCredentialFile: cred},
			Cluster:  &ClusterOptions{Etcd: []string{etcd}, Prefix: prefix, NodeID: id, LeaseTTL: 2 * time.Second, SharedStorage: "file://" + shared}})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			srv.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		nodes[id] = srv
	}
	eventually(t, "three nodes", func() (bool, string) { return len(nodes["n1"].ClusterMember().Nodes()) == 3, "" })
	ctx := context.Background()
	dial := func(id, tok string) *grpc.ClientConn {
		conn, err := grpc.NewClient(nodes[id].Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(bearer(tok)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	data := func(id, tok string) *bigtable.Table {
		c, err := bigtable.NewClientWithConfig(ctx, testProject, testInstance, bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}},
			option.WithGRPCConn(dial(id, tok)), option.WithoutAuthentication())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.Open("t")
	}
	admin, err := bigtable.NewAdminClient(ctx, testProject, testInstance, option.WithGRPCConn(dial("n1", tokAdmin)), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	createT := func() {
		t.Helper()
		if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", SplitKeys: []string{"g", "n"},
			ColumnFamilies: map[string]bigtable.Family{"f": {}}}); err != nil {
			t.Fatal(err)
		}
	}
	createT()
	if err := writeScale(t, data("n1", tokAdmin), "r", "v"); err != nil {
		t.Fatal(err)
	}
	iamOn := func(id string) adminpb.BigtableTableAdminClient {
		return adminpb.NewBigtableTableAdminClient(dial(id, tokAdmin))
	}
	set, err := iamOn("n1").SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: scaleTable, Policy: &iampb.Policy{Bindings: []*iampb.Binding{
		{Role: "roles/bigtable.admin", Members: []string{auth.TokenMember(tokAdmin)}},
		{Role: "roles/bigtable.reader", Members: []string{auth.TokenMember(tokReader)}},
	}}})
	if err != nil {
		t.Fatalf("set through n1: %v", err)
	}

	// Enforced by n2 once its watch delivers it (clusteriamcache_test.go):
	// the user token is in no binding, the reader's is.
	userN2 := data("n2", tokUser)
	eventually(t, "n2 to refuse a member the policy leaves out", func() (bool, string) {
		_, err := userN2.ReadRow(ctx, "r")
		return status.Code(err) == codes.PermissionDenied, fmt.Sprint(err)
	})
	if row, err := data("n2", tokReader).ReadRow(ctx, "r"); err != nil || len(row["f"]) != 1 {
		t.Errorf("read through n2 by a member the policy binds: %v %v", row, err)
	}

	// Read through n3, with the etag n1 gave.
	got, err := iamOn("n3").GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: scaleTable})
	if err != nil || len(got.GetBindings()) != 2 || len(got.GetEtag()) == 0 || string(got.GetEtag()) != string(set.GetEtag()) {
		t.Fatalf("policy through n3: %v %v, want %v", got, err, set)
	}
	// Replaced through n2 from it; n3's replace from the same etag is stale.
	got.Bindings = append(got.Bindings, &iampb.Binding{Role: "roles/bigtable.user", Members: []string{auth.TokenMember(tokUser)}})
	if _, err := iamOn("n2").SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: scaleTable, Policy: got}); err != nil {
		t.Fatalf("set through n2 from n3's etag: %v", err)
	}
	if _, err := iamOn("n3").SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: scaleTable, Policy: got}); status.Code(err) != codes.Aborted {
		t.Errorf("set through n3 from a stale etag: %v, want ABORTED", err)
	}
	userN3 := data("n3", tokUser)
	eventually(t, "n3 to pass the member bound since", func() (bool, string) {
		_, err := userN3.ReadRow(ctx, "r")
		return err == nil, fmt.Sprint(err)
	})

	// An authorized view's policy and the instance's: set through one
	// node, read through another; the view's goes with the view.
	view := scaleTable + "/authorizedViews/v"
	if _, err := iamOn("n1").CreateAuthorizedView(ctx, &adminpb.CreateAuthorizedViewRequest{Parent: scaleTable, AuthorizedViewId: "v",
		AuthorizedView: &adminpb.AuthorizedView{AuthorizedView: &adminpb.AuthorizedView_SubsetView_{SubsetView: &adminpb.AuthorizedView_SubsetView{
			RowPrefixes: [][]byte{[]byte("r")}}}}}); err != nil {
		t.Fatal(err)
	}
	for _, res := range []string{view, scaleInstance} {
		if _, err := iamOn("n2").SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: res, Policy: &iampb.Policy{Bindings: []*iampb.Binding{
			{Role: "roles/bigtable.admin", Members: []string{auth.TokenMember(tokAdmin)}}}}}); err != nil {
			t.Fatalf("set %s through n2: %v", res, err)
		}
		if p, err := iamOn("n3").GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: res}); err != nil || len(p.GetBindings()) != 1 {
			t.Errorf("policy of %s through n3: %v %v", res, p, err)
		}
	}
	if _, err := iamOn("n3").DeleteAuthorizedView(ctx, &adminpb.DeleteAuthorizedViewRequest{Name: view}); err != nil {
		t.Fatal(err)
	}
	if _, err := iamOn("n1").CreateAuthorizedView(ctx, &adminpb.CreateAuthorizedViewRequest{Parent: scaleTable, AuthorizedViewId: "v",
		AuthorizedView: &adminpb.AuthorizedView{AuthorizedView: &adminpb.AuthorizedView_SubsetView_{SubsetView: &adminpb.AuthorizedView_SubsetView{
			RowPrefixes: [][]byte{[]byte("r")}}}}}); err != nil {
		t.Fatal(err)
	}
	if p, err := iamOn("n2").GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: view}); err != nil || len(p.GetBindings()) != 0 {
		t.Errorf("policy of a view made again under the name: %v %v", p, err)
	}

	// A table made again under the name starts without the policy, on
	// every node.
	if err := admin.DeleteTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	createT()
	for _, id := range []string{"n1", "n2", "n3"} {
		p, err := iamOn(id).GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: scaleTable})
		if err != nil || len(p.GetBindings()) != 0 {
			t.Errorf("policy of a new table of the old name through %s: %v %v", id, p, err)
		}
	}
}
