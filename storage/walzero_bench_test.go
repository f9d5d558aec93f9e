//go:build linux

package storage

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// BenchmarkSyncedPointWrites measures what the zeros written ahead of a
// new WAL (walzero.go) buy single-row writes, and what they cost bulk
// writes: 8 goroutines commit synced batches of 100-byte values (rows=1:
// one key a batch, as ebbbench's point writes; rows=100: a hundred, as its
// bulk writes) into two databases on the disk, one writing its WAL over
// zeros and one growing it with each write. The arms alternate in slices
// of 800 batches, each first in every other slice, so both meet the same
// load on a shared machine. It
// reports each arm's wall time and process CPU per row (the file system's
// journal commits run in a kernel thread and are not counted).
func BenchmarkSyncedPointWrites(b *testing.B) {
	for _, rows := range []int{1, 100} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) { benchSyncedWrites(b, rows) })
	}
}

func benchSyncedWrites(b *testing.B, rows int) {
	const workers, slice = 8, 800
	type arm struct {
		name    string
		db      *DB
		n       int
		wall    time.Duration
		cpu     time.Duration
		nextKey int
	}
	var arms []*arm
	for _, grow := range []bool{false, true} {
		db, err := Open(Options{Dir: b.TempDir(), FullMemtable: true, growWAL: grow})
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		name := "zeroed"
		if grow {
			name = "growing"
		}
		arms = append(arms, &arm{name: name, db: db})
	}
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	val := make([]byte, 100)
	b.ResetTimer()
	for s, done := 0, 0; done < b.N; s, done = s+1, done+slice*rows {
		// Each arm goes first in every other slice, so neither always
		// meets the disk right after the other's syncs.
		order := []*arm{arms[s%2], arms[1-s%2]}
		for _, a := range order {
			start, c0 := time.Now(), cpu()
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; i < slice; i += workers {
						batch := a.db.NewBatch()
						for r := range rows {
							batch.Set(fmt.Appendf(nil, "row%09d-%03d", a.nextKey+i, r), val, nil)
						}
						if err := batch.Commit(pebble.Sync); err != nil {
							b.Error(err)
							return
						}
						batch.Close()
					}
				}()
			}
			wg.Wait()
			a.wall += time.Since(start)
			a.cpu += cpu() - c0
			a.n += slice * rows
			a.nextKey += slice
		}
	}
	b.StopTimer()
	for _, a := range arms {
		b.ReportMetric(float64(a.wall.Nanoseconds())/float64(a.n)/1e3, a.name+"-wall-µs/row")
		b.ReportMetric(float64(a.cpu.Nanoseconds())/float64(a.n)/1e3, a.name+"-cpu-µs/row")
	}
	b.ReportMetric(float64(arms[0].wall)/float64(arms[1].wall), "zeroed/growing-wall")
	b.ReportMetric(float64(arms[0].cpu)/float64(arms[1].cpu), "zeroed/growing-cpu")
}
