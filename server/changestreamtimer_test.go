package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/internal/testkit"
)

// TestTailingStreamLeavesNoTimers: a tailing change stream woken by a
// commit stops the heartbeat timer of the wait it leaves, so the pending
// timers on the server's (fake) clock do not grow with every write. Left
// behind, they pile up (each Advance walks them all) and break any test
// that counts the clock's waiters.
func TestTailingStreamLeavesNoTimers(t *testing.T) {
	env := newTestEnv(t)
	tbl := env.streamedTable(t, "cs", map[string]bigtable.GCPolicy{"cf": bigtable.NoGcPolicy()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := env.raw(t).ReadChangeStream(ctx, &btpb.ReadChangeStreamRequest{TableName: tableName("cs")})
	if err != nil {
		t.Fatal(err)
	}
	var changes atomic.Int32
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			resp, err := st.Recv()
			if err != nil {
				return
			}
			if resp.GetDataChange() != nil {
				changes.Add(1)
			}
		}
	}()
	defer func() { cancel(); <-ended }()
	write := func(i int) {
		t.Helper()
		mut := bigtable.NewMutation()
		mut.Set("cf", "q", bigtable.ServerTime, []byte("v"))
		if err := tbl.Apply(ctx, fmt.Sprintf("r%02d", i), mut); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "the stream to deliver the write", 10*time.Second, func() (bool, string) {
			return changes.Load() == int32(i+1), fmt.Sprintf("%d changes", changes.Load())
		})
	}
	write(0)
	before := env.clock.Waiters()
	const writes = 20
	for i := 1; i <= writes; i++ {
		write(i)
	}
	// The stream parks again with one timer; allow a little for other
	// loops of the server.
	testkit.Eventually(t, "the pending timers to stay put", 10*time.Second, func() (bool, string) {
		n := env.clock.Waiters()
		return n <= before+3, fmt.Sprintf("%d pending timers after %d woken waits, %d before", n, writes, before)
	})
}
