package collector

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/table"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkGCPass measures one full pass over a table of a million cells
// (100,000 columns × 10 versions) of which 10% are eligible, and the p99
// latency of concurrent point reads with and without the pass running.
//
//	go test -run '^$' -bench GCPass -benchtime 1x ./collector
//
// Throughput is measured on an unpaced pass; latency on a pass with the
// default pacing. EBBTABLE_BENCH_NOCOMPACT=1 leaves out the compaction
// that follows the paced pass, to separate its cost.
func BenchmarkGCPass(b *testing.B) {
	for _, tc := range []struct {
		name string
		rule string
		// eligible marks which of a column's 10 versions are old.
	}{
		{"versions", "maxversions=9"},
		{"age", "maxage=1h"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				benchPass(b, tc.rule)
			}
		})
	}
}

const (
	benchRows     = 100_000
	benchVersions = 10
)

func benchPass(b *testing.B, rule string) {
	b.StopTimer()
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	eng, err := table.Open(table.Options{Dir: b.TempDir(), Clock: fake, CacheBytes: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	// The collector's defaults (batches of 2,000 examined cells, 1 ms pause).
	col, err := New(eng, Options{Clock: fake, Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	const inst = "projects/p/instances/i"
	if _, err := eng.CreateTable(inst, "t", table.TableSpec{Families: []table.FamilySpec{{Name: "cf", GC: gcrule.MustParse(rule)}}}); err != nil {
		b.Fatal(err)
	}
	now := clock.MillisTruncated(fake.Now())
	val := make([]byte, 64)
	var entries []table.RowMutation
	flush := func() {
		if _, err := eng.MutateRows(inst, "t", entries); err != nil {
			b.Fatal(err)
		}
		entries = entries[:0]
	}
	for r := 0; r < benchRows; r++ {
		var muts []table.Mutation
		for v := 0; v < benchVersions; v++ {
			ts := now - int64(v)*1000
			if v == benchVersions-1 {
				ts = now - 2*time.Hour.Microseconds() // the one old version
			}
			muts = append(muts, table.Mutation{Kind: table.SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: ts, Value: val})
		}
		entries = append(entries, table.RowMutation{Row: []byte(fmt.Sprintf("row%07d", r)), Mutations: muts})
		if len(entries) == 2000 {
			flush()
		}
	}
	flush()
	if err := eng.Store().Flush(); err != nil {
		b.Fatal(err)
	}
	// Point reads from two clients at a steady 2,000 reads/s each (a
	// foreground load that leaves the machine room), latency sampled over a
	// window.
	readers := func(window time.Duration, during func()) []time.Duration {
		var mu sync.Mutex
		var lat []time.Duration
		var stop atomic.Bool
		var wg sync.WaitGroup
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func(seed uint64) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, 7))
				var local []time.Duration
				tick := time.NewTicker(500 * time.Microsecond)
				defer tick.Stop()
				for !stop.Load() {
					<-tick.C
					key := []byte(fmt.Sprintf("row%07d", rng.IntN(benchRows)))
					t0 := time.Now()
					err := eng.ReadRows(context.Background(), inst, "t", table.ReadRequest{Keys: [][]byte{key}}, func(cell.Row) error { return nil })
					if err != nil {
						b.Error(err)
						return
					}
					local = append(local, time.Since(t0))
				}
				mu.Lock()
				lat = append(lat, local...)
				mu.Unlock()
			}(uint64(w))
		}
		if during != nil {
			during()
		} else {
			time.Sleep(window)
		}
		stop.Store(true)
		wg.Wait()
		return lat
	}
	// The pass alone, for throughput (unpaced).
	col.opts.Pause = -1
	b.StartTimer()
	t1 := time.Now()
	st, err := col.RunPass(context.Background(), Selector{})
	scan := time.Since(t1) - st.Compaction
	b.StopTimer()
	col.opts.Pause = time.Millisecond
	if os.Getenv("EBBTABLE_BENCH_NOCOMPACT") != "" {
		col.opts.CompactMinBytes = 1 << 62
	}
	if err != nil {
		b.Fatal(err)
	}
	// A second table state for the latency comparison: rewrite the old
	// versions, then time reads during a pass and during as long idle.
	for r := 0; r < benchRows; r++ {
		entries = append(entries, table.RowMutation{Row: []byte(fmt.Sprintf("row%07d", r)), Mutations: []table.Mutation{
			{Kind: table.SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: now - 3*time.Hour.Microseconds(), Value: val}}})
		if len(entries) == 2000 {
			flush()
		}
	}
	flush()
	if err := eng.Store().Flush(); err != nil {
		b.Fatal(err)
	}
	var st2 PassStats
	t0 := time.Now()
	withPass := readers(0, func() {
		if st2, err = col.RunPass(context.Background(), Selector{}); err != nil {
			b.Fatal(err)
		}
	})
	without := readers(time.Since(t0), nil)
	if st2.Collected != benchRows {
		b.Fatalf("second pass collected %d", st2.Collected)
	}
	if st.Examined < benchRows*benchVersions/2 || st.Collected != benchRows {
		b.Fatalf("pass examined %d, collected %d; want ≥%d and %d", st.Examined, st.Collected, benchRows*benchVersions/2, benchRows)
	}
	p99 := func(l []time.Duration) time.Duration {
		slices.Sort(l)
		return l[len(l)*99/100]
	}
	b.ReportMetric(float64(st.Examined)/scan.Seconds(), "examined/s")
	b.ReportMetric(float64(st.Collected)/scan.Seconds(), "collected/s")
	b.ReportMetric(st.Compaction.Seconds(), "compact-s")
	b.ReportMetric(float64(p99(without).Microseconds()), "p99-idle-µs")
	b.ReportMetric(float64(p99(withPass).Microseconds()), "p99-pass-µs")
	b.ReportMetric(float64(p99(withPass))/float64(p99(without)), "p99-ratio")
}
