package server

import (
	"testing"

	"github.com/ebbtable/ebbtable/sqlquery"
)

// BenchmarkMaterializedViewIdleRead measures a read of a maintained view
// (10 groups over 2,000 rows) with nothing changed since its last
// maintenance round, without the gRPC layer: "idle" skips the round
// (maintIdle), "round" runs it anyway, as every read did before (the
// table's idle record dropped first: it reads the header, the log and the
// due deadlines, and commits nothing).
//
//	flock /tmp/ebb-bench.lock go test -run '^$' -bench MaterializedViewIdleRead -benchtime 2000x ./server
func BenchmarkMaterializedViewIdleRead(b *testing.B) {
	env, ctx := viewBenchSetup(b, 2000)
	mv, _, err := env.srv.keptView(sqlInstance, "vm")
	if err != nil || mv == nil {
		b.Fatal("vm is not maintained", err)
	}
	read := func() {
		n := 0
		if ok, err := env.srv.maintainedRows(ctx, sqlInstance, "vm", nil, func([]sqlquery.Value) error { n++; return nil }); err != nil || !ok || n != 10 {
			b.Fatalf("read %d rows (%v, %v), want 10", n, ok, err)
		}
	}
	read()
	for _, mode := range []string{"idle", "round"} {
		b.Run(mode, func(b *testing.B) {
			rounds := env.srv.mviews.rounds.Load()
			for b.Loop() {
				if mode == "round" {
					env.srv.mviews.idle.Delete(mv.meta.ID)
				}
				read()
			}
			if n := env.srv.mviews.rounds.Load() - rounds; (mode == "idle") != (n == 0) {
				b.Fatalf("%s: %d rounds run", mode, n)
			}
		})
	}
}
