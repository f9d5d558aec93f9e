package table

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ebbtable/ebbtable/cell"
)

// TestIterPoolTimerClosesIdleIterators runs the pool's real timer on
// synctest's fake time (time.Now, time.AfterFunc and the waits below are
// the bubble's: nothing waits on the wall clock). However the pool was used
// before, an iterator left idle in it is closed within twice iterMaxAge of
// its return: the first one, one put into the pool after the timer emptied
// it, and the last of a run of reads that emptied and refilled the pool
// many times. TestIterPoolClosesIdleIterators looks at the armed mark; this
// looks at the timer itself.
func TestIterPoolTimerClosesIdleIterators(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := openPlain(t)
		read := func() {
			t.Helper()
			if err := e.ReadRows(context.Background(), testInst, "t", ReadRequest{Keys: [][]byte{[]byte("x")}}, func(cell.Row) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		pooled := func() int {
			e.iters.mu.Lock()
			defer e.iters.mu.Unlock()
			return e.iters.n
		}
		idle := func(what string) {
			t.Helper()
			if n := pooled(); n != 1 {
				t.Fatalf("%s: pool holds %d iterators after a point read, want 1", what, n)
			}
			<-time.After(2*iterMaxAge + time.Millisecond)
			synctest.Wait() // the timer's call has run
			if n := pooled(); n != 0 {
				t.Fatalf("%s: pool holds %d iterators idle for twice iterMaxAge, want 0 (the timer never closes them)", what, n)
			}
		}
		read()
		idle("the first read")
		read()
		idle("a read after the timer emptied the pool")
		for range 40 { // 8 iterMaxAge of reads, each emptying and refilling the pool
			read()
			<-time.After(iterMaxAge / 5)
		}
		read()
		idle("the last of a run of reads")
	})
}
