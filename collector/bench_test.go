package collector

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/debug"
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
// Throughput (and the compaction's full-speed cost) is measured on an
// unpaced pass; latency on passes with the default pacing, compaction
// included. EBBTABLE_BENCH_NOCOMPACT=1 leaves out the compaction
// that follows the paced pass, to separate its cost.
func BenchmarkGCPass(b *testing.B) {
	// As 'ebbtable serve' runs (cli.DefaultGoGCPercent), unless GOGC is set.
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(400))
	}
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
	benchRounds   = 8
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
	if err := eng.Flush(); err != nil {
		b.Fatal(err)
	}
	// Point reads from two clients at a steady 2,000 reads/s each (a
	// foreground load that leaves the machine room), latency sampled over a
	// window.
	type sample struct {
		at  time.Time
		lat time.Duration
	}
	readers := func(window time.Duration, during func()) []sample {
		var mu sync.Mutex
		var lat []sample
		var stop atomic.Bool
		var wg sync.WaitGroup
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func(seed uint64) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, 7))
				var local []sample
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
					local = append(local, sample{t0, time.Since(t0)})
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
	// The pass alone, for throughput, and its compaction at full speed, for
	// its cost (both unpaced).
	col.opts.Pause, col.opts.ReclaimRate = -1, -1
	b.StartTimer()
	t1 := time.Now()
	st, err := col.RunPass(context.Background(), Selector{})
	scan := time.Since(t1) - st.Compaction
	b.StopTimer()
	col.opts.Pause, col.opts.ReclaimRate = time.Millisecond, DefaultReclaimRate
	if os.Getenv("EBBTABLE_BENCH_NOCOMPACT") != "" {
		col.opts.CompactMinBytes = 1 << 62
	}
	if err != nil {
		b.Fatal(err)
	}
	if st.Examined < benchRows*benchVersions/2 || st.Collected != benchRows {
		b.Fatalf("pass examined %d, collected %d; want ≥%d and %d", st.Examined, st.Collected, benchRows*benchVersions/2, benchRows)
	}
	// The latency comparison, in rounds whose samples are pooled (a
	// single window's p99 rests on a few dozen reads and swings with the
	// machine): rewrite an old version in every row, then time reads while
	// idle for half as long as the last pass took, during a paced pass, and
	// idle for the other half. Idle time on both sides of the pass takes in
	// the state before it (the rewritten cells in a fresh file) and after it
	// (a block cache cold on the compacted files).
	var withPass, without []sample
	lastPass := time.Second
	var compacting []sample // the pass samples taken while it compacted
	var compaction time.Duration
	for round := 0; round < benchRounds; round++ {
		for r := 0; r < benchRows; r++ {
			entries = append(entries, table.RowMutation{Row: []byte(fmt.Sprintf("row%07d", r)), Mutations: []table.Mutation{
				{Kind: table.SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: now - int64(3+round)*time.Hour.Microseconds(), Value: val}}})
			if len(entries) == 2000 {
				flush()
			}
		}
		flush()
		if err := eng.Flush(); err != nil {
			b.Fatal(err)
		}
		without = append(without, readers(lastPass/2, nil)...)
		var st2 PassStats
		t0 := time.Now()
		during := readers(0, func() {
			if st2, err = col.RunPass(context.Background(), Selector{}); err != nil {
				b.Fatal(err)
			}
		})
		passEnd := time.Now()
		lastPass = passEnd.Sub(t0)
		without = append(without, readers(lastPass/2, nil)...)
		if st2.Collected != benchRows {
			b.Fatalf("round %d: pass collected %d, want %d", round, st2.Collected, benchRows)
		}
		withPass = append(withPass, during...)
		compaction += st2.Compaction
		for _, s := range during {
			if !s.at.Before(passEnd.Add(-st2.Compaction)) {
				compacting = append(compacting, s)
			}
		}
	}
	p99 := func(ss []sample) time.Duration {
		l := make([]time.Duration, 0, len(ss))
		for _, s := range ss {
			l = append(l, s.lat)
		}
		if len(l) == 0 {
			return 0
		}
		slices.Sort(l)
		return l[len(l)*99/100]
	}
	b.ReportMetric(float64(st.Examined)/scan.Seconds(), "examined/s")
	b.ReportMetric(float64(st.Collected)/scan.Seconds(), "collected/s")
	b.ReportMetric(st.Compaction.Seconds(), "compact-s")
	b.ReportMetric(float64(p99(without).Microseconds()), "p99-idle-µs")
	b.ReportMetric(float64(p99(withPass).Microseconds()), "p99-pass-µs")
	b.ReportMetric(float64(p99(withPass))/float64(p99(without)), "p99-ratio")
	b.ReportMetric(float64(p99(compacting).Microseconds()), "p99-compacting-µs")
	b.ReportMetric(compaction.Seconds()/benchRounds, "round-compact-s")
}
