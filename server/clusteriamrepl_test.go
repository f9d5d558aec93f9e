package server

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/iam/apiv1/iampb"
	"google.golang.org/grpc"
)

// iamClient is the IAM part of both admin services' clients.
type iamClient interface {
	GetIamPolicy(context.Context, *iampb.GetIamPolicyRequest, ...grpc.CallOption) (*iampb.Policy, error)
	SetIamPolicy(context.Context, *iampb.SetIamPolicyRequest, ...grpc.CallOption) (*iampb.Policy, error)
}

// clusterIAMBothWays (in TestClusterJoinsCluster: a = n1, n2 and b = m1,
// m2, clusters of two nodes peering with each other; m1 pulls for b, n1
// for a): IAM policies travel by replication between the clusters' etcd
// stores (clusteriamrepl.go). A table's policy set on a through n2 (not
// its puller) is read through both of b's nodes; an instance's set on b
// through m2 through both of a's; the table's set again on b later wins
// on every node of both, and stays (the adopted policy does not go back).
func clusterIAMBothWays(t *testing.T, all []*scaleNode) {
	t.Helper()
	ctx := context.Background()
	byID := map[string]*scaleNode{}
	for _, n := range all {
		byID[n.id] = n
	}
	instName := "projects/" + testProject + "/instances/" + testInstance
	tableIAM := func(id string) iamClient {
		return adminpb.NewBigtableTableAdminClient(byID[id].conn)
	}
	instIAM := func(id string) iamClient {
		return adminpb.NewBigtableInstanceAdminClient(byID[id].conn)
	}
	readers := func(p *iampb.Policy) []string {
		for _, b := range p.GetBindings() {
			if b.GetRole() == "roles/bigtable.reader" {
				return b.GetMembers()
			}
		}
		return nil
	}
	set := func(c iamClient, res, member string) {
		t.Helper()
		p, err := c.GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: res})
		if err != nil {
			t.Fatal(err)
		}
		p.Bindings = []*iampb.Binding{{Role: "roles/bigtable.reader", Members: []string{member}}}
		if _, err := c.SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: res, Policy: p}); err != nil {
			t.Fatalf("set the policy of %s: %v", res, err)
		}
	}
	readsEverywhere := func(what string, get func(id string) (*iampb.Policy, error), member string, ids ...string) {
		t.Helper()
		eventually(t, what, func() (bool, string) {
			for _, id := range ids {
				p, err := get(id)
				if err != nil {
					return false, id + ": " + err.Error()
				}
				if !slices.Equal(readers(p), []string{member}) {
					return false, fmt.Sprintf("through %s: %v", id, readers(p))
				}
			}
			return true, ""
		})
	}
	getTable := func(id string) (*iampb.Policy, error) {
		return tableIAM(id).GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: scaleTable})
	}
	getInst := func(id string) (*iampb.Policy, error) {
		return instIAM(id).GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: instName})
	}

	set(tableIAM("n2"), scaleTable, "user:alice@example.com")
	readsEverywhere("a's table policy through m1 and m2", getTable, "user:alice@example.com", "m1", "m2")
	set(instIAM("m2"), instName, "user:bob@example.com")
	readsEverywhere("b's instance policy through n1 and n2", getInst, "user:bob@example.com", "n1", "n2")

	// The later change wins on both sides, and stays.
	set(tableIAM("m1"), scaleTable, "user:carol@example.com")
	readsEverywhere("b's later table policy everywhere", getTable, "user:carol@example.com", "n1", "n2", "m1", "m2")
	set(tableIAM("n1"), scaleTable, "user:dave@example.com")
	readsEverywhere("a's later table policy everywhere", getTable, "user:dave@example.com", "n1", "n2", "m1", "m2")
	readsEverywhere("b's instance policy still everywhere", getInst, "user:bob@example.com", "n1", "n2", "m1", "m2")
}

// processIAMBothWays (in TestClusterJoinStartsOver: a process alone, a,
// and b = m1, m2, a cluster that joined it): a table's policy set on a is
// read through both of b's nodes, and one set later on b through m2 is
// read on a.
func processIAMBothWays(t *testing.T, a *cluster, b ...*scaleNode) {
	t.Helper()
	ctx := context.Background()
	readers := func(p *iampb.Policy) []string {
		for _, b := range p.GetBindings() {
			if b.GetRole() == "roles/bigtable.reader" {
				return b.GetMembers()
			}
		}
		return nil
	}
	h := a.admin.TableIAM("t")
	p, err := h.Policy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.Add("user:alice@example.com", "roles/bigtable.reader")
	if err := h.SetPolicy(ctx, p); err != nil {
		t.Fatal(err)
	}
	for _, n := range b {
		c := adminpb.NewBigtableTableAdminClient(n.conn)
		eventually(t, "a's policy through "+n.id, func() (bool, string) {
			p, err := c.GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: scaleTable})
			if err != nil {
				return false, err.Error()
			}
			return slices.Equal(readers(p), []string{"user:alice@example.com"}), fmt.Sprint(readers(p))
		})
	}
	c := adminpb.NewBigtableTableAdminClient(b[len(b)-1].conn)
	bp, err := c.GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: scaleTable})
	if err != nil {
		t.Fatal(err)
	}
	bp.Bindings = []*iampb.Binding{{Role: "roles/bigtable.reader", Members: []string{"user:bob@example.com"}}}
	if _, err := c.SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: scaleTable, Policy: bp}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b's later policy on a", func() (bool, string) {
		p, err := h.Policy(ctx)
		if err != nil {
			return false, err.Error()
		}
		got := fmt.Sprint(p.Members("roles/bigtable.reader"))
		return got == "[user:bob@example.com]", got
	})
}
