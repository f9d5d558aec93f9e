package server

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A deleted table's directory is kept in etcd for the undelete retention
// only: an undelete within it brings the table back, and after it etcd
// has dropped the directory (so UndeleteTable answers NOT_FOUND).
func TestScaleOutKeptDirectoryPurged(t *testing.T) {
	t.Parallel()
	// 5 s: the checks of the kept directory and the undelete below must
	// come within it (2 s ran out once with the other cluster tests at load 23).
	sc := startScaleClusterTuned(t, 0, func(o *Options) { o.UndeleteRetention = 5 * time.Second }, "n1", "n2", "n3")
	sc.knobs.minKeepDeleted.set(time.Second)
	ctx := context.Background()
	for _, id := range []string{"t", "u"} {
		if err := sc.nodes["n1"].admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: id, ColumnFamilies: map[string]bigtable.Family{"f": {}}}); err != nil {
			t.Fatal(err)
		}
		if err := writeScale(t, sc.nodes["n1"].client.Open(id), "a", "x"); err != nil {
			t.Fatal(err)
		}
	}
	// Each check follows its table's delete at once: the retention runs
	// from the delete's proposal, and u's create, write and delete between
	// t's delete and its check took over 5 s at load 43.
	m := sc.nodes["n3"].srv.ClusterMember()
	sent := time.Now()
	if err := sc.nodes["n2"].admin.DeleteTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := m.KeptDirectory(ctx, testInstanceName+"/tables/t"); err != nil || !ok {
		t.Fatalf("kept directory of t: %v %v (%v after the delete was sent)", ok, err, time.Since(sent))
	}
	sent = time.Now()
	if err := sc.nodes["n2"].admin.DeleteTable(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	// Undeleted within the retention: whole again, its directory live.
	if _, err := sc.nodes["n3"].rawAdmin().UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: testInstanceName + "/tables/u"}); err != nil {
		t.Fatalf("undelete u: %v (%v after the delete was sent)", err, time.Since(sent))
	}
	if row, err := sc.nodes["n2"].client.Open("u").ReadRow(ctx, "a"); err != nil || len(row["f"]) != 1 {
		t.Fatalf("row of the undeleted table: %v %v", row, err)
	}
	testkit.Eventually(t, "t's kept directory to go", 20*time.Second, func() (bool, string) {
		_, ok, err := m.KeptDirectory(ctx, testInstanceName+"/tables/t")
		return err == nil && !ok, "still kept"
	})
	if _, err := sc.nodes["n1"].rawAdmin().UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: testInstanceName + "/tables/t"}); status.Code(err) != codes.NotFound {
		t.Errorf("undelete after the retention: %v", err)
	}
	// u's directory, undeleted, is not under the kept one's lease.
	if _, ok := m.Directory(testInstanceName + "/tables/u"); !ok {
		t.Errorf("u's directory went with the retention")
	}
}
