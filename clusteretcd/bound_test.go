package clusteretcd

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/internal/etcdtest"
)

// Once a member is abandoned or closed, its etcd calls fail at once with
// ErrClosed, also those already waiting on an unreachable etcd: clientv3
// alone retries a closed client's calls until their contexts end, and a
// node shutting down waited out every job's timeout.
func TestClosedMemberCallsFailAtOnce(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"abandon", "close"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			ep, cut, _ := etcdtest.StartCuttable(t)
			m := join(t, ep, "a")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			// A call in flight against an etcd that stopped answering.
			cut()
			inFlight := make(chan error, 1)
			go func() {
				_, err := m.AppendEntry(ctx, SchemaEntry{Method: "CreateTable", Table: "i/tables/t"}, DirOp{})
				inFlight <- err
			}()
			select {
			case err := <-inFlight:
				t.Fatalf("the call returned before the member closed: %v", err)
			case <-time.After(300 * time.Millisecond):
			}
			start := time.Now()
			if how == "abandon" {
				m.Abandon()
			} else {
				m.Close() // its revoke waits up to 2 s on the cut etcd
			}
			if err := <-inFlight; !errors.Is(err, ErrClosed) {
				t.Errorf("the call in flight: %v, want ErrClosed", err)
			}
			// And a call made afterwards.
			if _, err := m.GetBackupRecord(ctx, "i/backups/c/b"); !errors.Is(err, ErrClosed) {
				t.Errorf("a call after: %v, want ErrClosed", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("the calls took %v after the member closed", d)
			}
		})
	}
}
