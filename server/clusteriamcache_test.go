package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/iam/apiv1/iampb"
	"github.com/ebbtable/ebbtable/auth"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestScaleOutIAMCache: in cluster mode each node enforces IAM from a
// cache its etcd watch feeds. A policy set through A is enforced by B
// once B's watch delivers it (the time is logged); with B's watch stuck,
// B stops trusting its cache within its freshness bound and enforces the
// policy read from etcd (ebbtable_iam_cache_stale is 1, the fallbacks
// counted); cut off from etcd, a governed call is refused, never let
// through on what the cache last held. The freshness bound is lowered
// (iamFresh) and etcd is cut at once (a proxy), not stopped, so the test
// waits no real seconds.
func TestScaleOutIAMCache(t *testing.T) {
	t.Parallel()
	const fresh = 500 * time.Millisecond
	c := newIAMClusterTuned(t, true, func(o *Options) {
		o.Cluster.iamFresh, o.Cluster.iamProgressEvery, o.Cluster.iamCheckTimeout = fresh, 100*time.Millisecond, time.Second
	}, "n1", "n2", "n3")
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
	testkit.Eventually(t, "B's cache to answer with the policy", 10*time.Second, func() (bool, string) {
		got, ok := mb.CachedIAMPolicies([]string{scaleTable})
		return ok && len(got) == 1, fmt.Sprintf("%v %v", got, ok)
	})
	if read("reader") != codes.OK {
		t.Fatal("the reader token, bound, refused")
	}
	t.Logf("a policy set through A was enforced by B %v after SetIamPolicy returned", took)

	// B's watch stuck: within the freshness bound B reads etcd instead of
	// its cache and enforces the policy set since.
	met := &c.nodes[b].cluster.iamCache
	fellBack := func(result string) float64 { return testutil.ToFloat64(met.fallbacks.WithLabelValues(result)) }
	viaEtcd := fellBack("etcd")
	release := mb.HoldWatch()
	defer release()
	setOn(a, tokUser)
	start = time.Now()
	testkit.Eventually(t, "B, its watch stuck, to enforce the new policy", 10*time.Second, func() (bool, string) {
		r, u := read("reader"), read("user")
		return r == codes.PermissionDenied && u == codes.OK, "reader " + r.String() + ", user " + u.String()
	})
	t.Logf("with its watch stuck, B enforced the new policy %v after it was set (freshness bound %v)", time.Since(start), fresh)
	if _, ok := mb.CachedIAMPolicies([]string{scaleTable}); ok {
		t.Error("B's cache answers with its watch stuck")
	}
	if v := testutil.ToFloat64(met.stale); v != 1 {
		t.Errorf("ebbtable_iam_cache_stale with B's watch stuck: %v, want 1", v)
	}
	if v := fellBack("etcd"); v <= viaEtcd {
		t.Errorf("ebbtable_iam_cache_fallbacks_total{result=etcd} with B's watch stuck: %v, was %v", v, viaEtcd)
	}
	release()
	testkit.Eventually(t, "B's cache current again", 10*time.Second, func() (bool, string) {
		got, ok := mb.CachedIAMPolicies([]string{scaleTable})
		return ok && len(got) == 1 && testutil.ToFloat64(met.stale) == 0, ""
	})

	// Cut off from etcd: once the cache is no longer current, the check
	// fails (UNAVAILABLE) instead of answering from the cache.
	unavailable := fellBack("unavailable")
	c.cutEtcd()
	start = time.Now()
	testkit.Eventually(t, "B's IAM check to fail without etcd", 10*time.Second, func() (bool, string) {
		d, _, err := c.nodes[b].iamAllows([]string{auth.TokenMember(tokUser)}, "bigtable.tables.readRows", scaleTable)
		if err == nil {
			return false, "decision without etcd: governed " + boolText(d.governed) + ", granted " + boolText(d.granted)
		}
		return status.Code(toStatus(err)) == codes.Unavailable, err.Error()
	})
	t.Logf("cut off from etcd, B refused the call %v after the cut", time.Since(start))
	if v := fellBack("unavailable"); v <= unavailable {
		t.Errorf("ebbtable_iam_cache_fallbacks_total{result=unavailable} without etcd: %v, was %v", v, unavailable)
	}
	// etcd back: every node's cache current again (and no etcd call left
	// waiting when the nodes close).
	c.healEtcd()
	testkit.Eventually(t, "every node's cache current again once etcd is back", 10*time.Second, func() (bool, string) {
		for id, n := range c.nodes {
			if !n.cluster.m.IAMCacheCurrent() {
				return false, id + "'s is not"
			}
		}
		return true, ""
	})
}

func boolText(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
