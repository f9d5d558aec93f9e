package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ebbtable/ebbtable/internal/testkit/servertest"
	"github.com/ebbtable/ebbtable/server"
	"github.com/ebbtable/ebbtable/table"
)

// TestJoinRefusesDataDirWithTables: a server started to join an instance
// on a data directory that holds tables (and never joined) refuses to
// start rather than replace them, and the tables are untouched. (The exit
// code and message of `serve --join` are cli's tests.)
func TestJoinRefusesDataDirWithTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := servertest.Start(t, servertest.WithOptions(func(o *server.Options) { o.ClusterID = "a" }))
	b := servertest.Start(t, servertest.WithOptions(func(o *server.Options) { o.ClusterID = "b" }))
	if err := b.Admin.CreateTable(ctx, "mine"); err != nil {
		t.Fatal(err)
	}
	b.Stop()

	srv, err := server.New(server.Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: b.Dir, ClusterID: "b", Join: a.Addr()})
	if err == nil {
		err = srv.Start()
		srv.Close()
	}
	if !errors.Is(err, table.ErrPrecondition) || !strings.Contains(err.Error(), "--join needs an empty data directory") {
		t.Fatalf("join over tables: %v", err)
	}

	// The tables are untouched.
	b = servertest.Start(t, servertest.Dir(b.Dir), servertest.WithOptions(func(o *server.Options) { o.ClusterID = "b" }))
	if tbls, err := b.Admin.Tables(ctx); err != nil || len(tbls) != 1 || tbls[0] != "mine" {
		t.Fatalf("tables after the refused join: %v %v", tbls, err)
	}
}
