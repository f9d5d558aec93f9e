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
// new WAL (walzero.go) buy single-row writes: 8 goroutines each commit
// synced one-key batches of 100-byte values, as ebbbench's point writes
// do, into two databases on the disk, one writing its WAL over zeros and
// one growing it with each write. The arms alternate in slices of 800
// writes, so both meet the same load on a shared machine. It reports each
// arm's wall time and process CPU per write (the file system's journal
// commits run in a kernel thread and are not counted).
func BenchmarkSyncedPointWrites(b *testing.B) {
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
	for done := 0; done < b.N; done += slice {
		for _, a := range arms {
			start, c0 := time.Now(), cpu()
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; i < slice; i += workers {
						k := fmt.Appendf(nil, "row%09d", a.nextKey+i)
						if err := a.db.Set(k, val, pebble.Sync); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			a.wall += time.Since(start)
			a.cpu += cpu() - c0
			a.n += slice
			a.nextKey += slice
		}
	}
	b.StopTimer()
	for _, a := range arms {
		b.ReportMetric(float64(a.wall.Nanoseconds())/float64(a.n)/1e3, a.name+"-wall-µs/write")
		b.ReportMetric(float64(a.cpu.Nanoseconds())/float64(a.n)/1e3, a.name+"-cpu-µs/write")
	}
	b.ReportMetric(float64(arms[0].wall)/float64(arms[1].wall), "zeroed/growing-wall")
	b.ReportMetric(float64(arms[0].cpu)/float64(arms[1].cpu), "zeroed/growing-cpu")
}
