package clusteretcd

import (
	"context"
	"testing"

	"github.com/ebbtable/ebbtable/internal/etcdtest"
)

// TestForgetDeadProgress: a live node's progress mark stays; once the
// node's key is gone, the mark goes.
func TestForgetDeadProgress(t *testing.T) {
	t.Parallel()
	ep := etcdtest.Start(t)
	a, b := join(t, ep, "a"), join(t, ep, "b")
	ctx := context.Background()
	if err := b.SetApplied(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if gone, err := a.ForgetDeadProgress(ctx, "b"); err != nil || gone {
		t.Fatalf("forget a live node's mark: %v %v", gone, err)
	}
	if p, _, _ := a.Progress(ctx); p["b"] != 3 {
		t.Fatalf("a live node's mark: %v", p)
	}
	b.Close()
	waitFor(t, a, "b gone", func() bool { _, ok := a.Node("b"); return !ok })
	if gone, err := a.ForgetDeadProgress(ctx, "b"); err != nil || !gone {
		t.Fatalf("forget a dead node's mark: %v %v", gone, err)
	}
	if p, _, _ := a.Progress(ctx); p["b"] != 0 {
		t.Fatalf("marks after b's was forgotten: %v", p)
	}
}
