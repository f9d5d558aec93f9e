package server

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/internal/testkit"
)

// A schema larger than etcd's request limit (1.5 MiB): two authorized
// views of 1,200 row prefixes of 600 bytes each make a snapshot over
// 1.5 MiB (the test checks its size; three views made one twice as
// large, for no more checked). The log is trimmed past them (the snapshot written in chunks),
// and a node with a new data directory starts from that snapshot with the
// views whole.
func TestScaleOutSchemaSnapshotLarge(t *testing.T) {
	t.Parallel()
	const scaleViews = 2
	sc := startScaleClusterTuned(t, 0, func(o *Options) { o.Cluster.SchemaTrimEvery = -1 }, "n1", "n2")
	sc.createTable(t, "n1")
	ctx := context.Background()
	n1 := sc.nodes["n1"]
	for v := range scaleViews {
		var prefixes [][]byte
		for i := range 1200 {
			p := make([]byte, 600)
			copy(p, fmt.Sprintf("v%d-%04d-", v, i))
			for j := 12; j < len(p); j++ {
				p[j] = byte('a' + (i*7+j)%26)
			}
			prefixes = append(prefixes, p)
		}
		if _, err := n1.rawAdmin().CreateAuthorizedView(ctx, &adminpb.CreateAuthorizedViewRequest{Parent: scaleTable, AuthorizedViewId: fmt.Sprintf("v%d", v),
			AuthorizedView: &adminpb.AuthorizedView{AuthorizedView: &adminpb.AuthorizedView_SubsetView_{SubsetView: &adminpb.AuthorizedView_SubsetView{RowPrefixes: prefixes}}}}); err != nil {
			t.Fatalf("view v%d: %v", v, err)
		}
	}
	data, err := n1.srv.cluster.buildSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the schema snapshot is %d bytes", len(data))
	if len(data) < 3<<19 {
		t.Fatalf("the schema is %d bytes, not over 1.5 MiB", len(data))
	}
	applied := n1.srv.cluster.appliedSeq()
	testkit.Eventually(t, "a trim past the views", 15*time.Second, func() (bool, string) {
		if _, err := n1.srv.cluster.trimSchemaLog(ctx); err != nil {
			return false, err.Error()
		}
		got := trimmed(t, n1)
		return got >= applied, fmt.Sprintf("trimmed to %d", got)
	})
	n3 := sc.start(t, "n3", filepath.Join(t.TempDir(), "n3"))
	t.Cleanup(n3.stop)
	if got, want := familyIDs(t, n3), familyIDs(t, n1); got != want {
		t.Fatalf("n3 from the snapshot: %s, n1: %s", got, want)
	}
	for v := range scaleViews {
		av, err := n3.rawAdmin().GetAuthorizedView(ctx, &adminpb.GetAuthorizedViewRequest{Name: fmt.Sprintf("%s/authorizedViews/v%d", scaleTable, v)})
		if err != nil {
			t.Fatalf("view v%d on n3: %v", v, err)
		}
		if got := len(av.GetSubsetView().GetRowPrefixes()); got != 1200 {
			t.Errorf("view v%d on n3 has %d row prefixes", v, got)
		}
	}
}
