package server

import (
	"context"
	"strings"
	"testing"

	"github.com/ebbtable/ebbtable/server/clusterpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestScaleOutDrainStopsAndGoesOn: a drain whose moves to one node fail
// moves the rest, fails with the moves made and the tablets left, and a
// second drain finishes it.
func TestScaleOutDrainStopsAndGoesOn(t *testing.T) {
	t.Parallel()
	sc := startScaleCluster(t, "n1", "n2", "n3")
	sc.createTable(t, "n1", "c", "g", "k", "p", "u") // two tablets a node
	ctx := context.Background()
	tbl := sc.nodes["n1"].client.Open("t")
	for _, r := range letters() {
		if err := writeScale(t, tbl, r, "v"+r); err != nil {
			t.Fatal(err)
		}
	}
	owned := func(node string) int {
		r, err := sc.nodes["n1"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for _, tb := range r.Tablets {
			if tb.Owner == node {
				k++
			}
		}
		return k
	}
	if owned("n2") != 2 {
		t.Fatalf("n2 owns %d tablets", owned("n2"))
	}
	// n3 refuses every ingest; n1 takes them.
	fault := func() error { return status.Error(codes.Unavailable, "injected: n3 cannot ingest") }
	sc.nodes["n3"].srv.cluster.ingestFault.Store(&fault)
	_, err := sc.nodes["n1"].ops.DrainNode(ctx, &clusterpb.DrainNodeRequest{Node: "n2"})
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "1 of 2 tablets moved, 1 left") {
		t.Fatalf("the drain with n3 refusing: %v", err)
	}
	var rep *clusterpb.DrainNodeResponse
	for _, d := range st.Details() {
		if r, ok := d.(*clusterpb.DrainNodeResponse); ok {
			rep = r
		}
	}
	if rep == nil || len(rep.Moves) != 1 || len(rep.Left) != 1 || !strings.Contains(rep.Moves[0], "n1") || !strings.Contains(rep.Left[0], "injected") {
		t.Fatalf("the drain's report: %+v", rep)
	}
	if owned("n2") != 1 {
		t.Fatalf("n2 owns %d tablets after the stopped drain", owned("n2"))
	}
	// Every row is still served, the one left on n2 too.
	if keys, _ := readScale(t, sc.nodes["n3"]); len(keys) != 26 {
		t.Fatalf("%d rows after the stopped drain", len(keys))
	}
	// Run again with n3 well: it goes on where it stopped.
	sc.nodes["n3"].srv.cluster.ingestFault.Store(nil)
	r, err := sc.nodes["n3"].ops.DrainNode(ctx, &clusterpb.DrainNodeRequest{Node: "n2"})
	if err != nil || len(r.Moves) != 1 || len(r.Left) != 0 {
		t.Fatalf("the drain run again: %+v %v", r, err)
	}
	if owned("n2") != 0 {
		t.Fatalf("n2 owns %d tablets after the second drain", owned("n2"))
	}
	if keys, vals := readScale(t, sc.nodes["n2"]); len(keys) != 26 || vals["m"] != "vm" {
		t.Fatalf("%d rows after the drain", len(keys))
	}
}
