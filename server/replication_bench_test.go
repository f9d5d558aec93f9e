package server

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/table"
)

// BenchmarkReplication measures, on loopback in one process:
//
//   - what replicating costs writers: the same rounds of ApplyBulk (8
//     writers × 10 bulks of 100 rows) against a cluster without peers and
//     one with a peer, interleaved, reported as rows/s and their ratio;
//
//   - how fast a peer catches up: rows/s from resuming its paused link
//     until it has applied everything the origin had committed;
//
//   - the lag of a single write: from its acknowledgement on one cluster
//     until a read on the other sees it, p50 and p99 over 200 writes.
//
//     go test ./server -run '^$' -bench Replication -benchtime 20x
func BenchmarkReplication(b *testing.B) {
	ctx := context.Background()
	start := func(id, join string) *Server {
		srv, err := New(Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: b.TempDir(), Clock: clock.Real{}, ClusterID: id, Join: join})
		if err != nil {
			b.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { srv.Close() })
		return srv
	}
	clients := func(addr string) (*bigtable.Client, *bigtable.AdminClient) {
		c, a := officialClients(b, addr, "")
		b.Cleanup(func() { c.Close(); a.Close() })
		return c, a
	}
	solo := start("solo", "")
	a := start("a", "")
	peer := start("b", a.Addr())
	soloC, soloA := clients(solo.Addr())
	aC, aA := clients(a.Addr())
	peerC, _ := clients(peer.Addr())
	conf := &bigtable.TableConf{TableID: "t", ColumnFamilies: map[string]bigtable.Family{"cf": {}}}
	for _, ad := range []*bigtable.AdminClient{soloA, aA} {
		if err := ad.CreateTableFromConf(ctx, conf); err != nil {
			b.Fatal(err)
		}
	}
	var pm *table.Meta
	for {
		var err error
		if pm, err = peer.engine.Table("projects/"+testProject+"/instances/"+testInstance, "t"); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	value := make([]byte, 100)
	const writers, bulks, rows = 8, 10, 100
	seq := 0
	round := func(tbl *bigtable.Table) time.Duration {
		seq++
		t0 := time.Now()
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range bulks {
					keys := make([]string, rows)
					muts := make([]*bigtable.Mutation, rows)
					for j := range keys {
						keys[j] = fmt.Sprintf("r%d-%d-%d-%d", seq, w, i, j)
						muts[j] = bigtable.NewMutation()
						muts[j].Set("cf", "c", bigtable.Now(), value)
					}
					if errs, err := tbl.ApplyBulk(ctx, keys, muts); err != nil || errs != nil {
						b.Errorf("ApplyBulk: %v %v", err, errs)
						return
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(t0)
	}
	// Three rounds per iteration: no peer; a peer pulling while the writes
	// run (it shares the two cores with the writers); a peer whose link is
	// paused during the writes (the origin's own cost: stamps, records),
	// then resumed to time the catch-up alone.
	var soloT, liveT, pausedT, catchT time.Duration
	b.ResetTimer()
	for range b.N {
		soloT += round(soloC.Open("t"))
		liveT += round(aC.Open("t"))
		if err := aA.WaitForReplication(ctx, "t"); err != nil {
			b.Fatal(err)
		}
		peer.repl.Pause("a")
		pausedT += round(aC.Open("t"))
		mark := a.engine.ClosedTimestamp()
		t0 := time.Now()
		peer.repl.Resume("a")
		for {
			pos, ok, err := peer.engine.Checkpoint(pm, "a")
			if err != nil {
				b.Fatal(err)
			}
			if ok && pos.Commit >= mark {
				break
			}
			time.Sleep(time.Millisecond)
		}
		catchT += time.Since(t0)
	}
	b.StopTimer()
	n := float64(b.N * writers * bulks * rows)
	b.ReportMetric(n/soloT.Seconds(), "solo-rows/s")
	b.ReportMetric(soloT.Seconds()/liveT.Seconds(), "live-peer/solo")
	b.ReportMetric(soloT.Seconds()/pausedT.Seconds(), "paused-peer/solo")
	b.ReportMetric(n/catchT.Seconds(), "catch-up-rows/s")

	// Lag of single writes.
	var lags []time.Duration
	for i := range 200 {
		row := fmt.Sprintf("lag-%d", i)
		m := bigtable.NewMutation()
		m.Set("cf", "c", bigtable.Now(), value)
		if err := aC.Open("t").Apply(ctx, row, m); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		for {
			r, err := peerC.Open("t").ReadRow(ctx, row)
			if err != nil {
				b.Fatal(err)
			}
			if len(r) > 0 {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
		lags = append(lags, time.Since(t0))
	}
	slices.Sort(lags)
	b.ReportMetric(float64(lags[len(lags)/2].Microseconds())/1000, "lag-p50-ms")
	b.ReportMetric(float64(lags[len(lags)*99/100].Microseconds())/1000, "lag-p99-ms")
}
