package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestScaleOutSlowReadDoesNotHoldAMove: a read whose client stops
// reading lets a move of its tablet go ahead; the official client's read
// then resumes at the next row and sees every row once, in order.
func TestScaleOutSlowReadDoesNotHoldAMove(t *testing.T) {
	t.Parallel()
	sc := startScaleCluster(t, "n1", "n2")
	sc.createTable(t, "n1")
	ctx := context.Background()
	tabs, err := sc.nodes["n1"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil || len(tabs.Tablets) != 1 {
		t.Fatalf("tablets: %v %v", tabs, err)
	}
	tablet := tabs.Tablets[0]
	other := map[string]string{"n1": "n2", "n2": "n1"}
	// About 8 MB: more than the read-ahead and the flow-control windows hold.
	const rows = 4000
	value := strings.Repeat("x", 2000)
	var keys []string
	var muts []*bigtable.Mutation
	for i := range rows {
		m := bigtable.NewMutation()
		m.Set("f", "c", bigtable.Timestamp(1000), []byte(value))
		keys, muts = append(keys, fmt.Sprintf("r%05d", i)), append(muts, m)
	}
	if errs, err := sc.nodes["n1"].client.Open("t").ApplyBulk(ctx, keys, muts); err != nil || errs != nil {
		t.Fatalf("bulk write: %v %v", errs, err)
	}
	owner := tablet.Owner
	move := func(what string) {
		t.Helper()
		mctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		to := other[owner]
		if _, err := sc.nodes["n1"].ops.MoveTablet(mctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: tablet.Id, To: to}); err != nil {
			t.Fatalf("move %s: %v", what, err)
		}
		owner = to
	}

	// A raw stream on the owner, read once and then left alone.
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	raw, err := btpb.NewBigtableClient(sc.nodes[owner].conn).ReadRows(rctx, &btpb.ReadRowsRequest{TableName: scaleTable})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Recv(); err != nil {
		t.Fatal(err)
	}
	move("past a stalled reader")
	// The stalled stream ends with UNAVAILABLE once drained.
	var got int
	for {
		r, err := raw.Recv()
		if err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("the stalled stream ended with %v", err)
			}
			break
		}
		for _, ch := range r.GetChunks() {
			if ch.GetCommitRow() {
				got++
			}
		}
	}
	if got >= rows-1 {
		t.Fatalf("the stalled stream delivered %d rows: it was not cut by the move", got)
	}
	t.Logf("the stalled stream delivered %d of %d rows, then UNAVAILABLE", got+1, rows)

	// The official client through the other node: its callback holds the
	// first row until the tablet moved; the read resumes on the new owner.
	var mu sync.Mutex
	var seen []string
	first := make(chan struct{})
	moved := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- sc.nodes["n2"].client.Open("t").ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
			mu.Lock()
			seen = append(seen, r.Key())
			n := len(seen)
			mu.Unlock()
			if n == 1 {
				close(first)
				<-moved
			}
			return true
		})
	}()
	<-first
	move("past a slow client")
	close(moved)
	if err := <-done; err != nil {
		t.Fatalf("the slow read: %v", err)
	}
	if len(seen) != rows {
		t.Fatalf("the slow read saw %d rows, want %d", len(seen), rows)
	}
	for i, k := range seen {
		if k != keys[i] {
			t.Fatalf("row %d is %s, want %s", i, k, keys[i])
		}
	}
}

// TestScaleOutRowsLimitCountsLocalRows: a rows limit spans tablets read
// here and tablets read on their owners.
func TestScaleOutRowsLimitCountsLocalRows(t *testing.T) {
	t.Parallel()
	sc := startScaleCluster(t, "n1", "n2", "n3")
	sc.createTable(t, "n1", "g", "p") // n1 owns [, g)
	tbl := sc.nodes["n2"].client.Open("t")
	for _, r := range letters() {
		if err := writeScale(t, tbl, r, "v"+r); err != nil {
			t.Fatal(err)
		}
	}
	for _, limit := range []int64{3, 8, 20} {
		keys, _ := readScale(t, sc.nodes["n1"], bigtable.LimitRows(limit))
		if int64(len(keys)) != limit || keys[0] != "a" {
			t.Errorf("limit %d through n1: %d rows %v", limit, len(keys), keys)
		}
	}
}
