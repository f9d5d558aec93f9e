package rowttl

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/table"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkRowDeletion measures one run over a table of 100,000 rows of
// which half are expired, and the p99 latency of concurrent point reads
// (two clients, 2,000 reads/s each) while the run goes, with the default
// pacing, against as long a window with the job idle (and a second idle
// window, to show the machine's noise).
//
//	go test -run '^$' -bench RowDeletion -benchtime 1x ./rowttl
func BenchmarkRowDeletion(b *testing.B) {
	for i := 0; i < b.N; i++ {
		benchRun(b)
	}
}

const benchRows = 100_000

func benchRun(b *testing.B) {
	b.StopTimer()
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	eng, err := table.Open(table.Options{Dir: b.TempDir(), Clock: fake, CacheBytes: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	eng.SetRowExpiry(RowExpired)
	opts := Options{Clock: fake, Registerer: prometheus.NewRegistry()}
	if v := os.Getenv("EBBTABLE_BENCH_PAUSE"); v != "" {
		opts.Pause, _ = time.ParseDuration(v)
	}
	if v := os.Getenv("EBBTABLE_BENCH_BATCH"); v != "" {
		opts.BatchRows, _ = strconv.Atoi(v)
	}
	job, err := New(eng, opts)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := eng.CreateTable(inst, "t", table.TableSpec{Families: []table.FamilySpec{{Name: "meta"}, {Name: "d"}}}); err != nil {
		b.Fatal(err)
	}
	now := fake.Now()
	val := make([]byte, 64)
	var entries []table.RowMutation
	flush := func() {
		if _, err := eng.MutateRows(inst, "t", entries); err != nil {
			b.Fatal(err)
		}
		entries = entries[:0]
	}
	for r := 0; r < benchRows; r++ {
		ts := now.Add(time.Hour)
		if r%2 == 0 {
			ts = now.Add(-48 * time.Hour)
		}
		entries = append(entries, table.RowMutation{Row: []byte(fmt.Sprintf("row%07d", r)), Mutations: []table.Mutation{
			{Kind: table.SetCell, Family: "meta", Qualifier: []byte("created_at"), Timestamp: table.ServerTimestamp, Value: micros(ts)},
			{Kind: table.SetCell, Family: "d", Qualifier: []byte("v"), Timestamp: table.ServerTimestamp, Value: val},
		}})
		if len(entries) == 2000 {
			flush()
		}
	}
	flush()
	if err := eng.Flush(); err != nil {
		b.Fatal(err)
	}
	if _, err := Exec(eng, inst, "ALTER TABLE t ADD ROW DELETION POLICY (OLDER_THAN(`meta:created_at`, INTERVAL 1 DAY))"); err != nil {
		b.Fatal(err)
	}
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
					if err := eng.ReadRows(context.Background(), inst, "t", table.ReadRequest{Keys: [][]byte{key}}, func(cell.Row) error { return nil }); err != nil {
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
	var st RunStats
	b.StartTimer()
	t0 := time.Now()
	withRun := readers(0, func() {
		if st, err = job.Run(context.Background(), Selector{}); err != nil {
			b.Fatal(err)
		}
	})
	elapsed := time.Since(t0)
	b.StopTimer()
	idle := readers(elapsed, nil)
	// A second idle window: the ratio of two idle windows is the noise
	// floor of the machine the benchmark runs on.
	idle2 := readers(elapsed, nil)
	if st.Deleted != benchRows/2 {
		b.Fatalf("run deleted %d rows, want %d", st.Deleted, benchRows/2)
	}
	p99 := func(l []time.Duration) time.Duration {
		slices.Sort(l)
		return l[len(l)*99/100]
	}
	b.ReportMetric(float64(st.Deleted)/elapsed.Seconds(), "deleted/s")
	b.ReportMetric(float64(p99(idle).Microseconds()), "p99-idle-µs")
	b.ReportMetric(float64(p99(withRun).Microseconds()), "p99-run-µs")
	b.ReportMetric(float64(p99(withRun))/float64(p99(idle)), "p99-ratio")
	b.ReportMetric(float64(p99(idle2))/float64(p99(idle)), "idle-idle-ratio")
}
