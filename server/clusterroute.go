package server

import (
	"sync"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	tablets "github.com/ebbtable/ebbtable/cluster"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// routeToOwners sends items of table name to the owners of their rows'
// tablets, one group per tablet, all tablets at once: rowOf gives an item's
// row, send delivers one tablet's group. The groups that fail go again,
// routed on the directory as it is then, while their owners answer
// UNAVAILABLE (a tablet moved or split meanwhile), up to applyRetries
// times; between attempts it waits for the directory to change or 50 ms.
// noTablets is the error when the table has no directory.
func routeToOwners[T any](c *clusterMember, name string, items []T, noTablets error,
	rowOf func(T) ([]byte, error), send func(d tablets.Directory, i int, group []T) error) error {
	pending := items
	for attempt := 0; ; attempt++ {
		changed := c.m.Changed()
		d, ok := c.m.Directory(name)
		if !ok {
			return noTablets
		}
		groups := map[int][]T{}
		var order []int
		for _, it := range pending {
			row, err := rowOf(it)
			if err != nil {
				return err
			}
			i := d.Locate(row)
			if _, ok := groups[i]; !ok {
				order = append(order, i)
			}
			groups[i] = append(groups[i], it)
		}
		errs := make([]error, len(order))
		var wg sync.WaitGroup
		for j, i := range order {
			wg.Go(func() { errs[j] = send(d, i, groups[i]) })
		}
		wg.Wait()
		pending = nil
		var last error
		for j, i := range order {
			if errs[j] != nil {
				pending = append(pending, groups[i]...)
				last = errs[j]
			}
		}
		if len(pending) == 0 {
			return nil
		}
		if attempt >= applyRetries || status.Code(last) != codes.Unavailable {
			return last
		}
		timer, stop := clock.Timer(c.s.opts.Clock, 50*time.Millisecond) // stopped when another case wins
		select {
		case <-changed:
		case <-timer: // a directory the owner sees first
		case <-c.stop:
			stop()
			return clusteretcd.ErrClosed
		}
		stop()
	}
}
