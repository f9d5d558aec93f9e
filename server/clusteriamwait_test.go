package server

import (
	"context"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/auth"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Cut off from etcd, an IAM check whose cache is not current fails
// UNAVAILABLE within iamCheckWait (the product's bound: no test override
// of the check's timeout), not after the 10 s of an etcd call; sooner,
// at its deadline, for a request whose deadline is sooner.
func TestScaleOutIAMCheckFailsFast(t *testing.T) {
	c := newIAMClusterTuned(t, false, func(o *Options) {
		o.Cluster.iamFresh, o.Cluster.iamProgressEvery = 500*time.Millisecond, 100*time.Millisecond
	}, "n1")
	n := c.nodes["n1"]
	c.cutEtcd()
	testkit.Eventually(t, "n1's cache no longer current", 10*time.Second, func() (bool, string) {
		return !n.cluster.m.IAMCacheCurrent(), "current"
	})
	start := time.Now()
	_, _, err := n.iamAllows([]string{auth.TokenMember(tokUser)}, "bigtable.tables.readRows", scaleTable)
	took := time.Since(start)
	t.Logf("cut off from etcd, the IAM check failed after %v: %v", took, err)
	if status.Code(toStatus(err)) != codes.Unavailable {
		t.Fatalf("IAM check without etcd: %v", err)
	}
	if took > iamCheckWait+time.Second {
		t.Errorf("the IAM check without etcd took %v, want at most %v (+1s)", took, iamCheckWait)
	}
	// A request whose deadline is sooner fails at its deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, _, err = n.iamDecide(ctx, []string{auth.TokenMember(tokUser)}, "bigtable.tables.readRows", scaleTable, nil)
	took = time.Since(start)
	t.Logf("with a 300ms deadline, the IAM check failed after %v: %v", took, err)
	if status.Code(toStatus(err)) != codes.Unavailable {
		t.Fatalf("IAM check without etcd, 300ms deadline: %v", err)
	}
	if took > time.Second {
		t.Errorf("the IAM check of a request with a 300ms deadline took %v without etcd", took)
	}
	c.healEtcd()
	testkit.Eventually(t, "n1's cache current again once etcd is back", 10*time.Second, func() (bool, string) {
		return n.cluster.m.IAMCacheCurrent(), "not current"
	})
}
