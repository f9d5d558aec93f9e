package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/collector"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

func withTTL(ctx context.Context, ttl string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, MetaCellTTL, ttl)
}

func cellsOf(row bigtable.Row, fam string) []string {
	var out []string
	for _, it := range row[fam] {
		out = append(out, fmt.Sprintf("%s@%d=%s", it.Column, it.Timestamp, it.Value))
	}
	return out
}

// TestNativeTTLHasNoneOfTheSimulationsFlaws walks the flaws the cell-TTL
// simulations document, one by one.
func TestNativeTTLHasNoneOfTheSimulationsFlaws(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	// A family with a real retention rule, holding real timestamps.
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"cf": bigtable.MaxAgePolicy(30 * 24 * time.Hour)})
	writeTime := bigtable.Time(env.clock.Now())
	set(t, tbl, "r", "cf", "plain", writeTime, "no ttl")

	// Flaws 1 and 3: two cells of one column share an expiry, keep their
	// real (distinct) write timestamps, and do not overwrite each other.
	m := bigtable.NewMutation()
	m.Set("cf", "ttl", writeTime, []byte("first"))
	m.Set("cf", "ttl", writeTime-1000, []byte("second"))
	if err := tbl.Apply(withTTL(ctx, "1h"), "r", m); err != nil {
		t.Fatal(err)
	}
	// Flaw 2: the TTL cells sit alongside real-timestamp cells of the same
	// family, which follow the family rule only.
	row, err := tbl.ReadRow(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(cellsOf(row, "cf"), " ")
	want := fmt.Sprintf("cf:plain@%d=no ttl cf:ttl@%d=first cf:ttl@%d=second", writeTime, writeTime, writeTime-1000)
	if got != want {
		t.Fatalf("before expiry:\n got %s\nwant %s", got, want)
	}

	// A reader can learn the expiry through the official client.
	row, err = tbl.ReadRow(metadata.AppendToOutgoingContext(ctx, MetaShowExpiry, "true"), "r", bigtable.RowFilter(bigtable.ColumnFilter("ttl")))
	if err != nil {
		t.Fatal(err)
	}
	wantLabel := ExpiryLabel(env.clock.Now().Add(time.Hour).UnixMilli() * 1000)
	if l := row["cf"][0].Labels; len(l) != 1 || l[0] != wantLabel {
		t.Fatalf("expiry labels %v, want [%s]", l, wantLabel)
	}

	// Flaw 5: readers need no filter — an expired cell is hidden at once,
	// in both visibility modes; the collector then removes it.
	env.clock.Advance(time.Hour)
	row, _ = tbl.ReadRow(ctx, "r")
	if got := strings.Join(cellsOf(row, "cf"), " "); got != fmt.Sprintf("cf:plain@%d=no ttl", writeTime) {
		t.Fatalf("after expiry: %s", got)
	}
	// Flaw 4: the cell written without a TTL is still there and follows the
	// family's 30-day rule and nothing else.
	env.clock.Advance(29 * 24 * time.Hour)
	if row, _ := tbl.ReadRow(ctx, "r"); len(row["cf"]) != 1 {
		t.Fatalf("plain cell lost before its family rule said so: %v", row)
	}
	// (The background loop on the fake clock may have run already.)
	if _, err := env.srv.collector.RunPass(ctx, collector.Selector{}); err != nil {
		t.Fatal(err)
	}
	if n := storedCells(t, env, "t"); n != 1 {
		t.Fatalf("%d cells stored after a pass, want only the plain one", n)
	}
	env.clock.Advance(2 * 24 * time.Hour)
	if row, _ := tbl.ReadRow(ctx, "r"); len(row["cf"]) != 0 {
		t.Fatalf("plain cell outlived its family rule: %v", row)
	}
}

func TestNativeTTLInUntilCollectedModeIsExact(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, withVisibility(1))
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"cf": bigtable.MaxVersionsPolicy(1)})
	m := bigtable.NewMutation()
	m.Set("cf", "q", bigtable.Time(env.clock.Now()), []byte("v"))
	if err := tbl.Apply(withTTL(ctx, "90s"), "r", m); err != nil {
		t.Fatal(err)
	}
	set(t, tbl, "r", "cf", "q", bigtable.Time(env.clock.Now())-1000, "older")
	if row, _ := tbl.ReadRow(ctx, "r"); len(row["cf"]) != 2 {
		t.Fatalf("until-collected mode should show the eligible older version: %v", row)
	}
	env.clock.Advance(90 * time.Second)
	row, _ := tbl.ReadRow(ctx, "r")
	if got := cellsOf(row, "cf"); len(got) != 1 || !strings.HasSuffix(got[0], "=older") {
		t.Fatalf("expired cell visible in until-collected mode: %v", got)
	}
}

func TestCellTTLValidation(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"cf": nil})
	for _, bad := range []string{"0s", "-5s", "500us", "forever", "1.5d", "4000000d"} {
		m := bigtable.NewMutation()
		m.Set("cf", "q", 1000, []byte("v"))
		err := tbl.Apply(withTTL(ctx, bad), "r", m)
		wantCode(t, err, codes.InvalidArgument)
	}
	// Expiry past year 9999 through the absolute form.
	m := bigtable.NewMutation()
	m.Set("cf", "q", 1000, []byte("v"))
	wantCode(t, tbl.Apply(metadata.AppendToOutgoingContext(ctx, MetaCellExpireAt, "10000-01-01T00:00:00Z"), "r", m), codes.InvalidArgument)
	if err := tbl.Apply(metadata.AppendToOutgoingContext(ctx, MetaCellExpireAt, env.clock.Now().Add(time.Minute).Format(time.RFC3339)), "r", m); err != nil {
		t.Fatal(err)
	}
	// The largest TTL that stays within year 9999 is fine: no overflow.
	if err := tbl.Apply(withTTL(ctx, "2900000d"), "r2", m); err != nil {
		t.Fatal(err)
	}
	if row, _ := tbl.ReadRow(ctx, "r2"); len(row["cf"]) != 1 {
		t.Fatal("long-TTL cell not readable")
	}
	// TTL through MutateRows and CheckAndMutate too.
	errs, err := tbl.ApplyBulk(withTTL(ctx, "1m"), []string{"b1", "b2"}, []*bigtable.Mutation{m, m})
	if err != nil || errs != nil {
		t.Fatal(err, errs)
	}
	cond := bigtable.NewCondMutation(nil, m, m)
	if err := tbl.Apply(withTTL(ctx, "1m"), "b1", cond); err != nil {
		t.Fatal(err)
	}
	env.clock.Advance(time.Minute)
	if rows := readAll(t, tbl, bigtable.PrefixRange("b")); len(rows) != 0 {
		t.Fatalf("bulk/conditional TTL cells still visible: %v", rowKeys(rows))
	}
}

// TestExpiryTimestampGuard: the one-second pattern's first flaw — a writer
// that forgets the convention — fails loudly on a guarded family.
func TestExpiryTimestampGuard(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"exp": bigtable.MaxAgePolicy(time.Second)})
	conn, err := grpc.NewClient(env.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &ebbadminpb.SetFamilyOptionsRequest{Project: testProject, Instance: testInstance, Table: "t", Family: "exp", ExpiryTimestamps: proto.Bool(true)}
	if _, err := ebbadminpb.NewEbbAdminClient(conn).SetFamilyOptions(ctx, req); err != nil {
		t.Fatal(err)
	}
	m := bigtable.NewMutation()
	m.Set("exp", "q", bigtable.ServerTime, []byte("v"))
	err = tbl.Apply(ctx, "r", m)
	wantCode(t, err, codes.FailedPrecondition)
	if !strings.Contains(err.Error(), "expiry") {
		t.Fatalf("message does not explain: %v", err)
	}
	// Writing the expiry time as the timestamp works.
	expiry := bigtable.Time(env.clock.Now().Add(time.Hour))
	set(t, tbl, "r", "exp", "q", expiry, "v")
	env.clock.Advance(time.Hour)
	if row, _ := tbl.ReadRow(ctx, "r"); len(row["exp"]) != 1 {
		t.Fatal("cell gone at its expiry moment; it must last until one second past")
	}
	env.clock.Advance(1001 * time.Millisecond)
	if row, _ := tbl.ReadRow(ctx, "r"); len(row["exp"]) != 0 {
		t.Fatal("cell still visible more than a second after its expiry")
	}
}

// TestReadModifyWriteKeepsTheCellTTL: incrementing a counter that has a
// native TTL keeps the TTL; a guarded family refuses read-modify-write.
func TestReadModifyWriteKeepsTheCellTTL(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"cf": nil})
	m := bigtable.NewMutation()
	m.Set("cf", "n", bigtable.Time(env.clock.Now()), make([]byte, 8))
	if err := tbl.Apply(withTTL(ctx, "1h"), "r", m); err != nil {
		t.Fatal(err)
	}
	env.clock.Advance(time.Minute)
	rmw := bigtable.NewReadModifyWrite()
	rmw.Increment("cf", "n", 1)
	if _, err := tbl.ApplyReadModifyWrite(ctx, "r", rmw); err != nil {
		t.Fatal(err)
	}
	env.clock.Advance(59 * time.Minute)
	if row, _ := tbl.ReadRow(ctx, "r"); len(row["cf"]) != 0 {
		t.Fatalf("counter outlived its TTL: %v", row)
	}
	conn, err := grpc.NewClient(env.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &ebbadminpb.SetFamilyOptionsRequest{Project: testProject, Instance: testInstance, Table: "t", Family: "cf", ExpiryTimestamps: proto.Bool(true)}
	if _, err := ebbadminpb.NewEbbAdminClient(conn).SetFamilyOptions(ctx, req); err != nil {
		t.Fatal(err)
	}
	_, err = tbl.ApplyReadModifyWrite(ctx, "r", rmw)
	wantCode(t, err, codes.FailedPrecondition)
}
