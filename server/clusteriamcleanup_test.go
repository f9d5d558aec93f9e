package server

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/iam/apiv1/iampb"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"google.golang.org/api/option"
)

// TestScaleOutIAMCleanup: in cluster mode a resource's IAM policies leave
// etcd with it. A deleted table's (and its authorized views') are kept
// with its directory for the undelete retention, under the same lease:
// gone with it, kept for good when the table is undeleted.
// TestScaleOutInstanceIAMCleanup has the instances'.
func TestScaleOutIAMCleanup(t *testing.T) {
	t.Parallel()
	c := newIAMClusterTuned(t, false, func(o *Options) { o.UndeleteRetention = 5 * time.Second }, "n1", "n2") // 2 s lapsed between a delete and its undelete at load 34
	c.knobs.minKeepDeleted.set(time.Second)
	ctx := context.Background()
	adm, ta := c.admin("n1", ""), c.tableAdmin("n1", "")
	for _, id := range []string{"t", "u"} {
		if err := adm.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: id, ColumnFamilies: map[string]bigtable.Family{"f": {}}}); err != nil {
			t.Fatal(err)
		}
	}
	u := testInstanceName + "/tables/u"
	view := u + "/authorizedViews/v"
	if _, err := ta.CreateAuthorizedView(ctx, &adminpb.CreateAuthorizedViewRequest{Parent: u, AuthorizedViewId: "v",
		AuthorizedView: &adminpb.AuthorizedView{AuthorizedView: &adminpb.AuthorizedView_SubsetView_{SubsetView: &adminpb.AuthorizedView_SubsetView{
			RowPrefixes: [][]byte{[]byte("r")}}}}}); err != nil {
		t.Fatal(err)
	}
	set := func(res string) {
		t.Helper()
		if _, err := ta.SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: res, Policy: &iampb.Policy{Bindings: []*iampb.Binding{
			{Role: "roles/bigtable.reader", Members: []string{"user:someone@example.com"}}}}}); err != nil {
			t.Fatalf("set %s: %v", res, err)
		}
	}
	keys := func() string {
		t.Helper()
		all, err := c.nodes["n2"].cluster.m.ListIAMPolicies(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for k := range all {
			out = append(out, strings.TrimPrefix(k, testInstanceName))
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	for _, res := range []string{scaleTable, u, view} {
		set(res)
	}
	if got := keys(); got != "/tables/t /tables/u /tables/u/authorizedViews/v" {
		t.Fatalf("policies in etcd: %q", got)
	}

	// u deleted and undeleted; t deleted: t's policy goes with its kept
	// directory, u's and its view's stay.
	if err := c.admin("n2", "").DeleteTable(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.tableAdmin("n1", "").UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: u}); err != nil {
		t.Fatalf("undelete u: %v", err)
	}
	if err := c.admin("n2", "").DeleteTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "t's policy to go with its kept directory", 20*time.Second, func() (bool, string) {
		got := keys()
		return got == "/tables/u /tables/u/authorizedViews/v", got
	})
	if p, err := c.tableAdmin("n2", "").GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: view}); err != nil || len(p.GetBindings()) != 1 {
		t.Errorf("policy of the undeleted table's view: %v %v", p, err)
	}
}

// TestScaleOutInstanceIAMCleanup: a deleted instance's IAM policy goes
// from etcd when the cluster has no table of it (a new instance of the
// name starts without it), and stays while it has one: DeleteInstance
// drops the instance's tables, whose directories are kept for the
// undelete retention. That retention is left at its default (a minute)
// here: with TestScaleOutIAMCleanup's 2 s (5 s now), a process starved for 2 s
// between the drop and the policy's check saw no kept table and rightly
// dropped the policy.
func TestScaleOutInstanceIAMCleanup(t *testing.T) {
	t.Parallel()
	c := newIAMClusterTuned(t, false, nil, "n1", "n2")
	ctx := context.Background()
	ta := c.tableAdmin("n1", "")
	set := func(res string) {
		t.Helper()
		if _, err := ta.SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: res, Policy: &iampb.Policy{Bindings: []*iampb.Binding{
			{Role: "roles/bigtable.reader", Members: []string{"user:someone@example.com"}}}}}); err != nil {
			t.Fatalf("set %s: %v", res, err)
		}
	}

	// A deleted instance with no table in the cluster: its policy goes; a
	// new instance of the name starts without one.
	iac := c.instanceAdmin("n1", "")
	i2 := "projects/" + testProject + "/instances/i2"
	if err := iac.CreateInstance(ctx, &bigtable.InstanceConf{InstanceId: "i2", ClusterId: "c1", Zone: "z"}); err != nil {
		t.Fatal(err)
	}
	set(i2)
	if err := iac.DeleteInstance(ctx, "i2"); err != nil {
		t.Fatal(err)
	}
	if err := c.instanceAdmin("n2", "").CreateInstance(ctx, &bigtable.InstanceConf{InstanceId: "i2", ClusterId: "c1", Zone: "z"}); err != nil {
		t.Fatal(err)
	}
	if p, err := c.tableAdmin("n2", "").GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: i2}); err != nil || len(p.GetBindings()) != 0 {
		t.Errorf("policy of an instance made again under the name: %v %v", p, err)
	}

	// One the cluster still has a table of keeps it: it governs them.
	i3 := "projects/" + testProject + "/instances/i3"
	if err := iac.CreateInstance(ctx, &bigtable.InstanceConf{InstanceId: "i3", ClusterId: "c1", Zone: "z"}); err != nil {
		t.Fatal(err)
	}
	a3, err := bigtable.NewAdminClient(ctx, testProject, "i3", option.WithGRPCConn(c.dial("n1", "")), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	defer a3.Close()
	if err := a3.CreateTable(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	set(i3)
	if err := iac.DeleteInstance(ctx, "i3"); err != nil {
		t.Fatal(err)
	}
	if p, err := c.tableAdmin("n2", "").GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: i3}); err != nil || len(p.GetBindings()) != 1 {
		t.Errorf("policy of a deleted instance the cluster has a table of: %v %v", p, err)
	}
}
