package server

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/iam/apiv1/iampb"
	"github.com/ebbtable/ebbtable/auth"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestScaleOutIAMCache: in cluster mode each node enforces IAM from a
// cache its etcd watch feeds. A policy set through A is enforced by B
// once B's watch delivers it (the time is logged); with B's watch stuck,
// B stops trusting its cache within IAMFresh and enforces the policy read
// from etcd; with etcd gone, a governed call is refused, never let
// through on what the cache last held.
func TestScaleOutIAMCache(t *testing.T) {
	t.Parallel()
	c := newIAMCluster(t, true, "n1", "n2", "n3")
	ctx := context.Background()
	c.createTable("n1", tokAdmin)
	if err := writeScale(t, c.data("n1", tokAdmin), "r", "v"); err != nil {
		t.Fatal(err)
	}
	setOn := func(id string, members ...string) {
		t.Helper()
		p := &iampb.Policy{Bindings: []*iampb.Binding{{Role: "roles/bigtable.admin", Members: []string{auth.TokenMember(tokAdmin)}}}}
		for _, m := range members {
			p.Bindings = append(p.Bindings, &iampb.Binding{Role: "roles/bigtable.reader", Members: []string{auth.TokenMember(m)}})
		}
		if _, err := c.tableAdmin(id, tokAdmin).SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: scaleTable, Policy: p}); err != nil {
			t.Fatalf("set through %s: %v", id, err)
		}
	}
	// B is the tablet's owner (a forwarded call is checked by the owner
	// too, so B's own decision shows only there); A another node.
	d, _ := c.nodes["n1"].ClusterMember().Directory(testInstanceName + "/tables/t")
	b := d.Tablets[0].Owner
	a := "n1"
	if b == a {
		a = "n2"
	}
	reader, user := c.data(b, tokReader), c.data(b, tokUser)
	read := func(who string) codes.Code {
		tbl := reader
		if who == "user" {
			tbl = user
		}
		_, err := tbl.ReadRow(ctx, "r")
		return status.Code(err)
	}
	if read("reader") != codes.OK || read("user") != codes.OK {
		t.Fatal("reads with no policy")
	}
	mb := c.nodes[b].cluster.m

	// Set through A: in B's cache once its watch delivers it.
	setOn(a, tokReader)
	start := time.Now()
	testkit.Eventually(t, "B to refuse the user token", 10*time.Second, func() (bool, string) {
		return read("user") == codes.PermissionDenied, read("user").String()
	})
	took := time.Since(start)
	if got, ok := mb.CachedIAMPolicies([]string{scaleTable}); !ok || len(got) != 1 {
		t.Fatalf("B's cache: %v %v, want the policy", got, ok)
	}
	if read("reader") != codes.OK {
		t.Fatal("the reader token, bound, refused")
	}
	t.Logf("a policy set through A was enforced by B %v after SetIamPolicy returned", took)

	// B's watch stuck: within IAMFresh B reads etcd instead of its cache
	// and enforces the policy set since.
	release := mb.HoldWatch()
	defer release()
	setOn(a, tokUser)
	start = time.Now()
	testkit.Eventually(t, "B, its watch stuck, to enforce the new policy", clusteretcd.IAMFresh+10*time.Second, func() (bool, string) {
		r, u := read("reader"), read("user")
		return r == codes.PermissionDenied && u == codes.OK, "reader " + r.String() + ", user " + u.String()
	})
	t.Logf("with its watch stuck, B enforced the new policy %v after it was set (IAMFresh %v)", time.Since(start), clusteretcd.IAMFresh)
	if _, ok := mb.CachedIAMPolicies([]string{scaleTable}); ok {
		t.Error("B's cache answers with its watch stuck")
	}
	release()
	testkit.Eventually(t, "B's cache current again", 10*time.Second, func() (bool, string) {
		got, ok := mb.CachedIAMPolicies([]string{scaleTable})
		return ok && len(got) == 1, ""
	})

	// etcd gone: once the cache is no longer current, the check fails
	// (UNAVAILABLE) instead of answering from the cache. (etcd's graceful
	// stop keeps the watch answering for a while, and each read that
	// finds no etcd waits iamTimeout: a wide bound.)
	c.stopEtcd()
	testkit.Eventually(t, "B's IAM check to fail without etcd", clusteretcd.IAMFresh+60*time.Second, func() (bool, string) {
		d, _, err := c.nodes[b].iamAllows([]string{auth.TokenMember(tokUser)}, "bigtable.tables.readRows", scaleTable)
		if err == nil {
			return false, "decision without etcd: governed " + boolText(d.governed) + ", granted " + boolText(d.granted)
		}
		return status.Code(toStatus(err)) == codes.Unavailable, err.Error()
	})
}

func boolText(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
