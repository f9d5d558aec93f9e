package server

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"cloud.google.com/go/iam"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ebbtable/ebbtable/internal/testkit"
)

// Tests for the API surface the client's prod-mode integration suite
// reaches (issue 18): authorized views enforced, IAM policies stored,
// declared instances, automated backups on the injected clock, and
// SampleRowKeys row ranges. The suite itself runs in package compat.

func readThrough(t *testing.T, tbl bigtable.TableAPI, rs bigtable.RowSet, opts ...bigtable.ReadOption) string {
	t.Helper()
	var cells []string
	err := tbl.ReadRows(context.Background(), rs, func(r bigtable.Row) bool {
		for _, items := range r {
			for _, it := range items {
				cells = append(cells, it.Row+"/"+it.Column)
			}
		}
		return true
	}, opts...)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	sort.Strings(cells)
	return strings.Join(cells, ",")
}

func TestAuthorizedViewEnforced(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	tbl := env.createTable(t, "av", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy(), "g": bigtable.NoGcPolicy()})
	for _, w := range []struct{ row, fam, col string }{
		{"a1", "f", "c1"}, {"r1", "f", "c1"}, {"r1", "f", "c9"}, {"r1", "f", "px"}, {"r1", "f", "pz"},
		{"r1", "g", "c1"}, {"r12", "f", "c1"}, {"r2", "f", "c1"},
	} {
		m := bigtable.NewMutation()
		m.Set(w.fam, w.col, 1000, []byte("v"))
		if err := tbl.Apply(ctx, w.row, m); err != nil {
			t.Fatal(err)
		}
	}
	err := env.admin.CreateAuthorizedView(ctx, &bigtable.AuthorizedViewConf{
		TableID: "av", AuthorizedViewID: "v",
		AuthorizedView: &bigtable.SubsetViewConf{
			RowPrefixes:   [][]byte{[]byte("r1")},
			FamilySubsets: map[string]bigtable.FamilySubset{"f": {Qualifiers: [][]byte{[]byte("c1"), []byte("px")}, QualifierPrefixes: [][]byte{[]byte("p")}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	av := env.client.OpenAuthorizedView("av", "v")

	// Reads see only the view's rows and columns; a qualifier both listed
	// and under a listed prefix comes once.
	if got, want := readThrough(t, av, bigtable.RowRange{}), "r1/f:c1,r1/f:px,r1/f:pz,r12/f:c1"; got != want {
		t.Errorf("whole view: %s, want %s", got, want)
	}
	if got, want := readThrough(t, av, bigtable.NewRange("a", "r11"), bigtable.RowFilter(bigtable.ColumnFilter("p.*"))), "r1/f:px,r1/f:pz"; got != want {
		t.Errorf("range with a filter: %s, want %s", got, want)
	}
	if got, want := readThrough(t, av, bigtable.RowList{"a1", "r12", "r2"}), "r12/f:c1"; got != want {
		t.Errorf("row list: %s, want %s", got, want)
	}
	if got, want := readThrough(t, av, bigtable.InfiniteRange("a"), bigtable.LimitRows(1)), "r1/f:c1,r1/f:px,r1/f:pz"; got != want {
		t.Errorf("rows limit: %s, want %s", got, want)
	}

	// Writes outside the view are refused with PermissionDenied.
	denied := func(what string, err error) {
		t.Helper()
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s: %v, want PermissionDenied", what, err)
		}
	}
	m := bigtable.NewMutation()
	m.Set("g", "c1", 2000, []byte("w"))
	denied("a column outside", av.Apply(ctx, "r1", m))
	m = bigtable.NewMutation()
	m.Set("f", "c1", 2000, []byte("w"))
	denied("a row outside", av.Apply(ctx, "r2", m))
	m = bigtable.NewMutation()
	m.DeleteRow()
	denied("DeleteFromRow", av.Apply(ctx, "r1", m))
	rmw := bigtable.NewReadModifyWrite()
	rmw.AppendValue("f", "c9", []byte("x"))
	_, err = av.ApplyReadModifyWrite(ctx, "r1", rmw)
	denied("read-modify-write outside", err)

	// A predicate sees only the view's cells: g:c1 exists but not in it.
	var matched bool
	ok := bigtable.NewMutation()
	ok.Set("f", "c1", 3000, []byte("t"))
	cond := bigtable.NewCondMutation(bigtable.FamilyFilter("g"), ok, nil)
	if err := av.Apply(ctx, "r1", cond, bigtable.GetCondMutationResult(&matched)); err != nil {
		t.Fatal(err)
	}
	if matched {
		t.Errorf("the predicate matched a cell outside the view")
	}
	// Bulk writes get a status per entry.
	m1, m2 := bigtable.NewMutation(), bigtable.NewMutation()
	m1.Set("f", "px", 4000, []byte("y"))
	m2.Set("f", "c1", 4000, []byte("y"))
	errs, err := av.ApplyBulk(ctx, []string{"r1", "a1"}, []*bigtable.Mutation{m1, m2})
	if err != nil || len(errs) != 2 || errs[0] != nil || status.Code(errs[1]) != codes.PermissionDenied {
		t.Errorf("bulk: %v %v", errs, err)
	}

	// Deletion protection.
	if err := env.admin.UpdateAuthorizedView(ctx, bigtable.UpdateAuthorizedViewConf{AuthorizedViewConf: bigtable.AuthorizedViewConf{TableID: "av", AuthorizedViewID: "v", DeletionProtection: bigtable.Protected}}); err != nil {
		t.Fatal(err)
	}
	if err := env.admin.DeleteAuthorizedView(ctx, "av", "v"); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("deleting a protected view: %v", err)
	}
	// A view goes with its table.
	if err := env.admin.DeleteTable(ctx, "av"); err != nil {
		t.Fatal(err)
	}
	env.createTable(t, "av", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	if _, err := env.admin.AuthorizedViewInfo(ctx, "av", "v"); status.Code(err) != codes.NotFound {
		t.Errorf("view of a deleted table: %v", err)
	}
}

func TestIAMPolicyStored(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	h := env.admin.TableIAM("t")
	p, err := h.Policy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.Add("user:a@example.com", iam.Viewer)
	if err := h.SetPolicy(ctx, p); err != nil {
		t.Fatal(err)
	}
	// Two writers read the policy; the second to write is stale.
	p1, err := h.Policy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := h.Policy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p1.Add("user:c@example.com", iam.Viewer)
	if err := h.SetPolicy(ctx, p1); err != nil {
		t.Fatal(err)
	}
	p2.Add("user:b@example.com", iam.Editor)
	if err := h.SetPolicy(ctx, p2); status.Code(err) != codes.Aborted {
		t.Errorf("stale etag: %v, want Aborted", err)
	}
	got, err := h.Policy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m := got.Members(iam.Viewer); len(m) != 2 || m[0] != "user:a@example.com" || m[1] != "user:c@example.com" || len(got.Members(iam.Editor)) != 0 {
		t.Errorf("stored policy: %v", got.InternalProto)
	}
	perms, err := h.TestPermissions(ctx, []string{"bigtable.tables.get", "bigtable.tables.readRows"})
	if err != nil || len(perms) != 2 {
		t.Errorf("TestIamPermissions: %v %v", perms, err)
	}
	if _, err := env.admin.TableIAM("missing").Policy(ctx); status.Code(err) != codes.NotFound {
		t.Errorf("policy of a missing table: %v", err)
	}
	// Instances have policies too (through the Instance Admin API).
	ih := env.instanceAdmin(t).InstanceIAM(testInstance)
	ip, err := ih.Policy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ip.Add("group:ops@example.com", iam.Owner)
	if err := ih.SetPolicy(ctx, ip); err != nil {
		t.Fatal(err)
	}
	if ip, err = ih.Policy(ctx); err != nil || len(ip.Members(iam.Owner)) != 1 {
		t.Errorf("instance policy: %v %v", ip.Roles(), err)
	}
	if _, err := ih.TestPermissions(ctx, []string{"not a permission"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a malformed permission: %v", err)
	}
	// A table created again under the name starts with no policy.
	if err := env.admin.DeleteTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	if got, err := h.Policy(ctx); err != nil || len(got.Roles()) != 0 {
		t.Errorf("policy of a new table: %v %v", got.Roles(), err)
	}
}

func TestDeclaredInstance(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	iac := env.instanceAdmin(t)
	err := iac.CreateInstanceWithClusters(ctx, &bigtable.InstanceWithClustersConfig{
		InstanceID: "made", DisplayName: "made here", InstanceType: bigtable.DEVELOPMENT,
		Clusters: []bigtable.ClusterConfig{{ClusterID: "c1", Zone: "zone-a", NumNodes: 2}, {ClusterID: "c2", Zone: "zone-b", NumNodes: 3}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := iac.CreateInstance(ctx, &bigtable.InstanceConf{InstanceId: "made", ClusterId: "x", Zone: "z"}); status.Code(err) != codes.AlreadyExists {
		t.Errorf("second create: %v", err)
	}
	info, err := iac.InstanceInfo(ctx, "made")
	if err != nil || info.DisplayName != "made here" || info.InstanceType != bigtable.DEVELOPMENT {
		t.Fatalf("instance: %+v %v", info, err)
	}
	cs, err := iac.Clusters(ctx, "made")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cs {
		got = append(got, fmt.Sprintf("%s %s %d %s", c.Name, c.Zone, c.ServeNodes, c.State))
	}
	sort.Strings(got)
	if want := "c1 zone-a 2 READY,c2 zone-b 3 READY"; strings.Join(got, ",") != want {
		t.Errorf("clusters: %q, want %q", got, want)
	}
	// Its tables go with it.
	admin := testkit.Admin(t, env.srv.Addr(), testProject, "made")
	if err := admin.CreateTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := iac.DeleteInstance(ctx, "made"); err != nil {
		t.Fatal(err)
	}
	if tables, err := admin.Tables(ctx); err != nil || len(tables) != 0 {
		t.Errorf("tables after DeleteInstance: %v %v", tables, err)
	}
	if err := iac.DeleteInstance(ctx, testInstance); status.Code(err) != codes.NotFound {
		t.Errorf("deleting an implicit instance: %v", err)
	}
}

func TestAutomatedBackupsTakenAndExpired(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	policy := bigtable.TableAutomatedBackupPolicy{RetentionPeriod: 72 * time.Hour, Frequency: 24 * time.Hour}
	if err := env.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "auto", AutomatedBackupConfig: &policy}); err != nil {
		t.Fatal(err)
	}
	env.createTable(t, "plain", nil)
	list := func() ([]string, error) {
		var out []string
		it := env.admin.Backups(ctx, "-")
		for {
			b, err := it.Next()
			if err == iterator.Done {
				return out, nil
			}
			if err != nil {
				return nil, err
			}
			out = append(out, b.SourceTable+" "+b.ExpireTime.Sub(b.StartTime).String())
		}
	}
	backups := func() []string {
		t.Helper()
		b, err := list()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// The loop takes the first backup at its first check.
	eventually(t, "the first automated backup", func() (bool, string) {
		env.clock.Advance(autoBackupCheckInterval)
		b, err := list() // fails while the backup is being made
		return err == nil && len(b) == 1, fmt.Sprint(b, err)
	})
	if b := backups(); b[0] != "auto 72h0m0s" {
		t.Fatalf("backup: %q, want one of table auto kept 72h", b)
	}
	// From here the test drives the checks itself, deterministically.
	env.srv.autoBkps.Stop()
	env.clock.Advance(23 * time.Hour)
	if err := env.srv.takeAutoBackups(ctx); err != nil {
		t.Fatal(err)
	}
	if b := backups(); len(b) != 1 {
		t.Fatalf("a backup before the frequency passed: %q", b)
	}
	env.clock.Advance(time.Hour)
	if err := env.srv.takeAutoBackups(ctx); err != nil {
		t.Fatal(err)
	}
	if b := backups(); len(b) != 2 {
		t.Fatalf("after 24h: %q, want 2 backups", b)
	}
	// The first expires 72h after it was taken; the second stays.
	env.clock.Advance(48 * time.Hour)
	if gone := env.srv.backups.DeleteExpired(); len(gone) != 1 {
		t.Fatalf("expired: %v, want the first backup", gone)
	}
	if b := backups(); len(b) != 1 {
		t.Fatalf("after expiry: %q", b)
	}
	// Turned off, no more backups are taken.
	if err := env.admin.UpdateTableDisableAutomatedBackupPolicy(ctx, "auto"); err != nil {
		t.Fatal(err)
	}
	env.clock.Advance(48 * time.Hour)
	if err := env.srv.takeAutoBackups(ctx); err != nil {
		t.Fatal(err)
	}
	env.srv.backups.DeleteExpired()
	if b := backups(); len(b) != 0 {
		t.Fatalf("with the policy off: %q", b)
	}
}

func TestSampleRowKeysRowRange(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	if err := env.admin.CreatePresplitTable(ctx, "s", []string{"b", "d", "f", "h"}); err != nil {
		t.Fatal(err)
	}
	raw := env.raw(t)
	sample := func(r *btpb.RowRange) string {
		st, err := raw.SampleRowKeys(ctx, &btpb.SampleRowKeysRequest{TableName: tableName("s"), RowRange: r})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for {
			resp, err := st.Recv()
			if err != nil {
				if status.Code(err) != codes.OK && err.Error() != "EOF" {
					t.Fatal(err)
				}
				break
			}
			keys = append(keys, fmt.Sprintf("%q", resp.RowKey))
		}
		return strings.Join(keys, ",")
	}
	for _, c := range []struct {
		r    *btpb.RowRange
		want string
	}{
		{nil, `"b","d","f","h",""`},
		{&btpb.RowRange{StartKey: &btpb.RowRange_StartKeyClosed{StartKeyClosed: []byte("c")}, EndKey: &btpb.RowRange_EndKeyOpen{EndKeyOpen: []byte("g")}}, `"d","f","g"`},
		{&btpb.RowRange{StartKey: &btpb.RowRange_StartKeyClosed{StartKeyClosed: []byte("d")}}, `"f","h",""`},
	} {
		if got := sample(c.r); got != c.want {
			t.Errorf("row range %v: %s, want %s", c.r, got, c.want)
		}
	}
}

func TestUndeleteTableThroughTheAdminAPI(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	tbl := env.createTable(t, "u", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	m := bigtable.NewMutation()
	m.Set("f", "q", 1000, []byte("kept"))
	if err := tbl.Apply(ctx, "r1", m); err != nil {
		t.Fatal(err)
	}
	if err := env.admin.CreateAuthorizedView(ctx, &bigtable.AuthorizedViewConf{TableID: "u", AuthorizedViewID: "v",
		AuthorizedView: &bigtable.SubsetViewConf{RowPrefixes: [][]byte{[]byte("r")}, FamilySubsets: map[string]bigtable.FamilySubset{"f": {QualifierPrefixes: [][]byte{{}}}}}}); err != nil {
		t.Fatal(err)
	}
	if err := env.admin.DeleteTable(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	raw := env.rawAdmin(t)
	op, err := raw.UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: tableName("u")})
	if err != nil {
		t.Fatal(err)
	}
	if !op.GetDone() || op.GetError() != nil {
		t.Fatalf("operation: %v", op)
	}
	if got := readThrough(t, env.client.OpenAuthorizedView("u", "v"), bigtable.RowRange{}); got != "r1/f:q" {
		t.Fatalf("through the view after undelete: %q", got)
	}
	if _, err := raw.UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: tableName("u")}); status.Code(err) != codes.AlreadyExists {
		t.Errorf("undelete over a live table: %v", err)
	}
	// Past the retention (7 days by default) the table is gone for good.
	if err := env.admin.DeleteTable(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	env.clock.Advance(DefaultUndeleteRetention)
	if _, err := raw.UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: tableName("u")}); status.Code(err) != codes.NotFound {
		t.Errorf("undelete after the retention: %v", err)
	}
}

func TestMicrosGranularityReturned(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	raw := env.rawAdmin(t)
	_, err := raw.CreateTable(ctx, &adminpb.CreateTableRequest{Parent: "projects/" + testProject + "/instances/" + testInstance, TableId: "m",
		Table: &adminpb.Table{Granularity: adminpb.Table_MICROS, ColumnFamilies: map[string]*adminpb.ColumnFamily{"f": {}}}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := raw.GetTable(ctx, &adminpb.GetTableRequest{Name: tableName("m")})
	if err != nil || got.GetGranularity() != adminpb.Table_MICROS {
		t.Fatalf("granularity %v %v, want MICROS", got.GetGranularity(), err)
	}
	m := bigtable.NewMutation()
	m.Set("f", "q", 1001, []byte("v"))
	if err := env.client.Open("m").Apply(ctx, "r", m); err != nil {
		t.Fatalf("a microsecond timestamp in a MICROS table: %v", err)
	}
}
