package server

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
)

func TestTableAdminLifecycle(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	policy := bigtable.UnionPolicy(bigtable.MaxAgePolicy(10*24*time.Hour), bigtable.MaxVersionsPolicy(2))
	env.createTable(t, "events", map[string]bigtable.GCPolicy{"cf": policy, "meta": nil})
	env.createTable(t, "other", nil)

	wantCode(t, env.admin.CreateTable(ctx, "events"), codes.AlreadyExists)
	wantCode(t, env.admin.CreateTable(ctx, "bad/name"), codes.InvalidArgument)

	tables, err := env.admin.Tables(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(tables)
	if fmt.Sprint(tables) != "[events other]" {
		t.Fatalf("tables %v", tables)
	}
	info, err := env.admin.TableInfo(ctx, "events")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range info.FamilyInfos {
		got[f.Name] = f.GCPolicy
	}
	if got["cf"] != "(age() > 10d || versions() > 2)" || got["meta"] != "<never>" {
		t.Fatalf("families %v", got)
	}
	_, err = env.admin.TableInfo(ctx, "missing")
	wantCode(t, err, codes.NotFound)

	// Update a rule, add and drop families.
	if err := env.admin.SetGCPolicy(ctx, "events", "meta", bigtable.MaxVersionsPolicy(1)); err != nil {
		t.Fatal(err)
	}
	wantCode(t, env.admin.SetGCPolicy(ctx, "events", "nope", bigtable.MaxVersionsPolicy(1)), codes.NotFound)
	wantCode(t, env.admin.CreateColumnFamily(ctx, "events", "cf"), codes.AlreadyExists)
	if err := env.admin.CreateColumnFamily(ctx, "events", "extra"); err != nil {
		t.Fatal(err)
	}
	info, _ = env.admin.TableInfo(ctx, "events")
	if len(info.FamilyInfos) != 3 {
		t.Fatalf("families after create: %+v", info.FamilyInfos)
	}
	for _, f := range info.FamilyInfos {
		if f.Name == "meta" && f.GCPolicy != "versions() > 1" {
			t.Fatalf("meta policy %q", f.GCPolicy)
		}
	}

	// Dropping a family drops its data, and recreating it does not bring it back.
	tbl := env.client.Open("events")
	now := bigtable.Time(env.clock.Now())
	set(t, tbl, "r", "extra", "q", now, "v")
	set(t, tbl, "r", "cf", "q", now, "v")
	if err := env.admin.DeleteColumnFamily(ctx, "events", "extra"); err != nil {
		t.Fatal(err)
	}
	if err := env.admin.CreateColumnFamily(ctx, "events", "extra"); err != nil {
		t.Fatal(err)
	}
	row, _ := tbl.ReadRow(ctx, "r")
	if len(row["extra"]) != 0 || len(row["cf"]) != 1 {
		t.Fatalf("row after drop and recreate: %v", row)
	}

	// Delete the table; a new one with the same name starts empty.
	if err := env.admin.DeleteTable(ctx, "events"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, env.admin.DeleteTable(ctx, "events"), codes.NotFound)
	tbl = env.createTable(t, "events", map[string]bigtable.GCPolicy{"cf": nil})
	if row, _ := tbl.ReadRow(ctx, "r"); len(row) != 0 {
		t.Fatalf("deleted table's data came back: %v", row)
	}
}

func TestDropRowRange(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"cf": nil})
	for _, k := range []string{"a#1", "a#2", "ab", "b#1"} {
		set(t, tbl, k, "cf", "q", 1000, "v")
	}
	if err := env.admin.DropRowRange(ctx, "t", "a#"); err != nil {
		t.Fatal(err)
	}
	if got := rowKeys(readAll(t, tbl, bigtable.InfiniteRange(""))); fmt.Sprint(got) != "[ab b#1]" {
		t.Fatalf("after prefix drop: %v", got)
	}
	if err := env.admin.DropAllRows(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, tbl, bigtable.InfiniteRange("")); len(got) != 0 {
		t.Fatalf("after drop all: %v", rowKeys(got))
	}
}

func TestDeletionProtectionAndConsistency(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	env.createTable(t, "t", nil)
	if err := env.admin.UpdateTableWithDeletionProtection(ctx, "t", bigtable.Protected); err != nil {
		t.Fatal(err)
	}
	wantCode(t, env.admin.DeleteTable(ctx, "t"), codes.FailedPrecondition)
	if err := env.admin.UpdateTableWithDeletionProtection(ctx, "t", bigtable.Unprotected); err != nil {
		t.Fatal(err)
	}
	if err := env.admin.WaitForReplication(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := env.admin.DeleteTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
}

func TestDataSurvivesRestart(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"cf": bigtable.MaxVersionsPolicy(3)})
	set(t, tbl, "r", "cf", "q", 1000, "v1")
	env.srv.Close()
	env.client.Close()
	env.admin.Close()
	env.start(t, Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: env.dir, Clock: env.clock})
	row, err := env.client.Open("t").ReadRow(ctx, "r")
	if err != nil || len(row["cf"]) != 1 || string(row["cf"][0].Value) != "v1" {
		t.Fatalf("after restart: %v %v", row, err)
	}
	info, _ := env.admin.TableInfo(ctx, "t")
	if info.FamilyInfos[0].GCPolicy != "versions() > 3" {
		t.Fatalf("policy after restart: %+v", info.FamilyInfos)
	}
}
