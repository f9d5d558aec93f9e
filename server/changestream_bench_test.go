package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// BenchmarkChangeStreamCost measures what a change stream costs writers:
// each iteration runs the same round of writes (8 concurrent writers, 10
// writes each; a write is one MutateRow, or one ApplyBulk of 100 rows)
// against a table without a stream and one with, interleaved so drift
// hits both alike, and reports rows/s of each and their ratio.
//
//	go test ./server -run '^$' -bench ChangeStreamCost -benchtime 50x
func BenchmarkChangeStreamCost(b *testing.B) {
	srv := startServer(b, Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: b.TempDir()})
	ctx := context.Background()
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client, err := bigtable.NewClientWithConfig(ctx, testProject, testInstance,
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}, DisableSession: true},
		option.WithGRPCConn(conn), option.WithoutAuthentication())
	if err != nil {
		b.Fatal(err)
	}
	admin, err := bigtable.NewAdminClient(ctx, testProject, testInstance, option.WithGRPCConn(conn), option.WithoutAuthentication())
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ret  time.Duration
	}{{"off", 0}, {"on", 24 * time.Hour}} {
		conf := &bigtable.TableConf{TableID: tc.name, ColumnFamilies: map[string]bigtable.Family{"cf": {}}}
		if tc.ret != 0 {
			conf.ChangeStreamRetention = tc.ret
		}
		if err := admin.CreateTableFromConf(ctx, conf); err != nil {
			b.Fatal(err)
		}
	}
	value := make([]byte, 100)
	const writers, perWriter = 8, 10
	for _, mode := range []struct {
		name string
		rows int
	}{{"MutateRow", 1}, {"ApplyBulk", 100}} {
		b.Run(mode.name, func(b *testing.B) {
			var spent [2]time.Duration
			seq := 0
			round := func(tbl *bigtable.Table) time.Duration {
				seq++
				start := time.Now()
				var wg sync.WaitGroup
				for w := 0; w < writers; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; i < perWriter; i++ {
							keys := make([]string, mode.rows)
							muts := make([]*bigtable.Mutation, mode.rows)
							for j := range keys {
								keys[j] = fmt.Sprintf("r%d-%d-%d-%d", seq, w, i, j)
								muts[j] = bigtable.NewMutation()
								muts[j].Set("cf", "q", bigtable.ServerTime, value)
							}
							var err error
							if mode.rows == 1 {
								err = tbl.Apply(ctx, keys[0], muts[0])
							} else {
								var errs []error
								errs, err = tbl.ApplyBulk(ctx, keys, muts)
								if err == nil && errs != nil {
									err = errs[0]
								}
							}
							if err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				return time.Since(start)
			}
			off, on := client.Open("off"), client.Open("on")
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				spent[0] += round(off)
				spent[1] += round(on)
			}
			rows := float64(b.N * writers * perWriter * mode.rows)
			b.ReportMetric(rows/spent[0].Seconds(), "rows/s-off")
			b.ReportMetric(rows/spent[1].Seconds(), "rows/s-on")
			b.ReportMetric(spent[0].Seconds()/spent[1].Seconds(), "on/off")
		})
	}
}
