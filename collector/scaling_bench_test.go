package collector

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkPassScaling measures a pass that collects the same 10,000 cells
// from a table of 200,000 cells and from one of 2,000,000, and reports the
// ratio of their costs (wall and CPU time of the process):
//
//	go test -run '^$' -bench PassScaling -benchtime 1x ./collector
//
// Each table holds rows of two cells, flushed to SSTables and swept whole
// once (a process's first pass); then the case adds what becomes eligible
// and the timed pass runs unpaced:
//
//   - versions: a new version in 10,000 random rows of a maxversions=1 family;
//   - ttl: 10,000 cells with a native expiry that passes;
//   - age-together: 10,000 cells that age past maxage=1h, in adjacent rows
//     (a time series' oldest stretch);
//   - age-scattered: the same cells one every few hundred, in random rows
//     (the blocks holding them must be read);
//   - whole: the versions case swept whole, as every pass did before
//     incremental passes.
func BenchmarkPassScaling(b *testing.B) {
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(400))
	}
	for _, kind := range []string{"versions", "ttl", "age-together", "age-scattered", "whole"} {
		b.Run(kind, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				small := passCost(b, kind, 200_000)
				large := passCost(b, kind, 2_000_000)
				b.ReportMetric(float64(small.wall.Microseconds())/1000, "200k-ms")
				b.ReportMetric(float64(large.wall.Microseconds())/1000, "2M-ms")
				b.ReportMetric(float64(small.cpu.Microseconds())/1000, "200k-cpu-ms")
				b.ReportMetric(float64(large.cpu.Microseconds())/1000, "2M-cpu-ms")
				b.ReportMetric(large.wall.Seconds()/small.wall.Seconds(), "wall-ratio")
				b.ReportMetric(large.cpu.Seconds()/small.cpu.Seconds(), "cpu-ratio")
				b.ReportMetric(float64(large.examined), "2M-examined")
			}
		})
	}
}

type passFigures struct {
	wall, cpu time.Duration
	examined  int64
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// passCost builds a table of cells cells for kind and times the pass that
// collects its 10,000 eligible cells.
func passCost(b *testing.B, kind string, cells int) passFigures {
	b.StopTimer()
	const eligible = 10_000
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	eng, err := table.Open(table.Options{Dir: b.TempDir(), Clock: fake, CacheBytes: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	col, err := New(eng, Options{Clock: fake, Registerer: prometheus.NewRegistry(), Pause: -1, AlwaysWhole: kind == "whole"})
	if err != nil {
		b.Fatal(err)
	}
	rule := "maxversions=1"
	if kind == "age-together" || kind == "age-scattered" {
		rule = "maxage=1h"
	}
	const inst = "projects/p/instances/i"
	if _, err := eng.CreateTable(inst, "t", table.TableSpec{Families: []table.FamilySpec{{Name: "cf", GC: gcrule.MustParse(rule)}}}); err != nil {
		b.Fatal(err)
	}
	now := clock.MillisTruncated(fake.Now())
	rows := cells / 2
	val := make([]byte, 32)
	rng := rand.New(rand.NewPCG(uint64(cells), 3))
	// The rows whose cells become eligible, for the age cases.
	old := map[int]bool{}
	switch kind {
	case "age-together":
		start := rng.IntN(rows - eligible/2)
		for r := start; r < start+eligible/2; r++ {
			old[r] = true
		}
	case "age-scattered":
		for len(old) < eligible/2 {
			old[rng.IntN(rows)] = true
		}
	}
	var entries []table.RowMutation
	write := func() {
		if _, err := eng.MutateRows(inst, "t", entries); err != nil {
			b.Fatal(err)
		}
		entries = entries[:0]
	}
	for r := 0; r < rows; r++ {
		ts := now
		if old[r] {
			ts = now - time.Hour.Microseconds() + time.Minute.Microseconds() // eligible in a minute
		}
		var muts []table.Mutation
		for q := 0; q < 2; q++ {
			muts = append(muts, table.Mutation{Kind: table.SetCell, Family: "cf", Qualifier: []byte{'a' + byte(q)}, Timestamp: ts, Value: val})
		}
		entries = append(entries, table.RowMutation{Row: []byte(fmt.Sprintf("row%08d", r)), Mutations: muts})
		if len(entries) == 2000 {
			write()
		}
	}
	write()
	// Compacted to its final shape, so background compactions of the load
	// do not run into (and bill their CPU to) the timed pass.
	if err := eng.Compact(context.Background(), storage.TablePrefix(0), storage.TableEnd(1<<40)); err != nil {
		b.Fatal(err)
	}
	// Past the agenda's slack, so the whole sweep settles the load's entries.
	fake.Advance(table.AgendaSlack + time.Second)
	if _, err := col.RunPass(context.Background(), Selector{}); err != nil { // the first: whole
		b.Fatal(err)
	}
	// The versions and TTL cases time three passes on the same table, each
	// collecting 10,000 new cells, and keep the median: a pass of a few
	// hundred milliseconds on a shared machine is noisy. The age cases
	// time the one pass their loaded cells allow.
	rounds := 3
	if kind == "age-together" || kind == "age-scattered" {
		rounds = 1
	}
	var figs []passFigures
	for round := 0; round < rounds; round++ {
		ts := now + int64(round+1)*1000
		picked := map[int]bool{}
		for kind != "age-together" && kind != "age-scattered" && len(picked) < eligible {
			picked[rng.IntN(rows)] = true
		}
		for r := range picked {
			mu := table.Mutation{Kind: table.SetCell, Family: "cf", Qualifier: []byte("a"), Timestamp: ts, Value: val}
			if kind == "ttl" {
				mu.Qualifier, mu.TTLMicros = []byte(fmt.Sprint("x", round)), 30_000_000
			}
			entries = append(entries, table.RowMutation{Row: []byte(fmt.Sprintf("row%08d", r)), Mutations: []table.Mutation{mu}})
			if len(entries) == 2000 {
				write()
			}
		}
		if len(picked) > 0 {
			write()
			if err := eng.Flush(); err != nil {
				b.Fatal(err)
			}
		}
		fake.Advance(2 * time.Minute)
		b.StartTimer()
		cpu0, t0 := cpuTime(), time.Now()
		st, err := col.RunPass(context.Background(), Selector{})
		wall, cpu := time.Since(t0), cpuTime()-cpu0
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if st.Collected != eligible {
			b.Fatalf("%s, %d cells: the pass collected %d, want %d", kind, cells, st.Collected, eligible)
		}
		b.Logf("%s, %d cells: %v wall, %v CPU, %d examined, incremental %d (%d rows), compaction %v", kind, cells, wall, cpu, st.Examined, st.Incremental, st.VisitedRows, st.Compaction)
		figs = append(figs, passFigures{wall: wall, cpu: cpu, examined: st.Examined})
	}
	slices.SortFunc(figs, func(a, b passFigures) int { return cmp.Compare(a.cpu, b.cpu) })
	return figs[len(figs)/2]
}
