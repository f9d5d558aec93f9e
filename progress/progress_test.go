package progress

import (
	"context"
	"fmt"
	"testing"
)

func TestOpThroughContext(t *testing.T) {
	var nilOp *Op
	nilOp.Phase("x", "cells", 3) // a nil Op ignores reports
	nilOp.Add(1)
	nilOp.Finish()
	FromContext(context.Background()).Add(1)

	op := NewOp()
	ctx := NewContext(context.Background(), op)
	FromContext(ctx).Phase("table t (1/2)", "cells", -1)
	FromContext(ctx).Add(5)
	FromContext(ctx).Add(2)
	if got, want := op.Snapshot(), (Snapshot{Phase: "table t (1/2)", Unit: "cells", Done: 7, Total: -1}); got != want {
		t.Fatalf("snapshot %+v, want %+v", got, want)
	}
	FromContext(ctx).Phase("table u (2/2)", "cells", 10)
	FromContext(ctx).Finish()
	if got, want := op.Snapshot(), (Snapshot{Phase: "table u (2/2)", Unit: "cells", Done: 0, Total: 10, Finished: true}); got != want {
		t.Fatalf("snapshot %+v, want %+v", got, want)
	}
}

func TestRegistryKeepsTheNewest(t *testing.T) {
	r := NewRegistry(3)
	for i := range 5 {
		op := NewOp()
		op.Add(int64(i))
		r.Attach(fmt.Sprint(i), op)
	}
	for i := range 5 {
		s, ok := r.Get(fmt.Sprint(i))
		if want := i >= 2; ok != want {
			t.Errorf("op %d registered: %v, want %v", i, ok, want)
		}
		if ok && s.Done != int64(i) {
			t.Errorf("op %d: done %d", i, s.Done)
		}
	}
	// Re-attaching an id moves it to the newest place.
	r.Attach("2", NewOp())
	r.Attach("5", NewOp())
	if _, ok := r.Get("2"); !ok {
		t.Error("re-attached op 2 was forgotten")
	}
	if _, ok := r.Get("3"); ok {
		t.Error("op 3 should be the oldest and forgotten")
	}
}

func TestEstimatedTotalGrows(t *testing.T) {
	op := NewOp()
	op.Phase("table t (1/1)", "cells", 10)
	op.Add(8)
	if s := op.Snapshot(); s.Done != 8 || s.Total != 10 {
		t.Fatalf("%+v", s)
	}
	op.Add(5)
	if s := op.Snapshot(); s.Done != 13 || s.Total != 13 {
		t.Fatalf("a short estimate did not grow: %+v", s)
	}
}
