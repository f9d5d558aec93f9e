package server

import (
	"context"
	"testing"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/iam/apiv1/iampb"
	"github.com/ebbtable/ebbtable/internal/testkit"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// metricSum sums a node's series of a metric whose labels include want.
func metricSum(t *testing.T, n *scaleNode, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := n.srv.opts.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for k, v := range want {
				found := false
				for _, l := range m.GetLabel() {
					if l.GetName() == k && l.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			sum += value(m)
		}
	}
	return sum
}

func value(m *dto.Metric) float64 {
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	return m.GetGauge().GetValue()
}

// A cluster backup's IAM policy is one for every node: set through one
// node, read and enforced through the others, replaced only from the
// etag last read (through any node), and gone with the backup.
func TestScaleOutBackupIAM(t *testing.T) {
	t.Parallel()
	sc := startScaleCluster(t, "n1", "n2", "n3")
	sc.createTable(t, "n1")
	ctx := context.Background()
	if err := sc.nodes["n1"].admin.CreateBackup(ctx, "t", "c1", "b1", time.Now().Add(7*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	res := scaleInstance + "/clusters/c1/backups/b1"
	admin := func(id string) adminpb.BigtableTableAdminClient {
		return adminpb.NewBigtableTableAdminClient(sc.nodes[id].conn)
	}
	set, err := admin("n1").SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: res, Policy: &iampb.Policy{
		Bindings: []*iampb.Binding{{Role: "roles/bigtable.viewer", Members: []string{"user:ana@example.com"}}}}})
	if err != nil {
		t.Fatalf("set through n1: %v", err)
	}
	for _, id := range []string{"n2", "n3"} {
		got, err := admin(id).GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: res})
		if err != nil {
			t.Fatalf("get through %s: %v", id, err)
		}
		if len(got.Bindings) != 1 || got.Bindings[0].Members[0] != "user:ana@example.com" || string(got.Etag) != string(set.Etag) {
			t.Errorf("policy through %s: %v, want %v", id, got, set)
		}
		// The enforcement reads the same policy.
		inst, path, ok := iamPath(res)
		if !ok {
			t.Fatal("no IAM path")
		}
		pols, err := sc.nodes[id].srv.iamPolicies(inst, path)
		if err != nil || len(pols) != 1 {
			t.Errorf("policies enforced on %s: %v %v", id, pols, err)
		}
	}
	// Changed through n2: n3's write from the older etag is refused.
	if _, err := admin("n2").SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: res, Policy: &iampb.Policy{Etag: set.Etag,
		Bindings: []*iampb.Binding{{Role: "roles/bigtable.admin", Members: []string{"user:bo@example.com"}}}}}); err != nil {
		t.Fatalf("set through n2: %v", err)
	}
	if _, err := admin("n3").SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: res, Policy: &iampb.Policy{Etag: set.Etag}}); status.Code(err) != codes.Aborted {
		t.Errorf("set from a stale etag through n3: %v", err)
	}
	// Deleted through n3: a backup made again under the name has none.
	if err := sc.nodes["n3"].admin.DeleteBackup(ctx, "c1", "b1"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin("n1").GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: res}); status.Code(err) != codes.NotFound {
		t.Errorf("policy of a deleted backup: %v", err)
	}
	if err := sc.nodes["n2"].admin.CreateBackup(ctx, "t", "c1", "b1", time.Now().Add(7*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got, err := admin("n1").GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: res}); err != nil || len(got.Bindings) != 0 {
		t.Errorf("policy of a new backup of the old name: %v %v", got, err)
	}
}

// Backup metrics summed over the nodes are the cluster's: operations
// counted once (by the node that ran them), ready backups and bytes
// reported by one node, another once it is gone.
func TestScaleOutBackupMetrics(t *testing.T) {
	t.Parallel()
	sc := startScaleCluster(t, "n1", "n2", "n3")
	sc.knobs.backupTotalsTTL.set(0)
	sc.createTable(t, "n1", "k")
	ctx := context.Background()
	if err := writeScale(t, sc.nodes["n1"].client.Open("t"), "a", "x"); err != nil {
		t.Fatal(err)
	}
	sum := func(ids []string, name string, labels map[string]string) (float64, int) {
		var s float64
		var nonzero int
		for _, id := range ids {
			v := metricSum(t, sc.nodes[id], name, labels)
			s += v
			if v != 0 {
				nonzero++
			}
		}
		return s, nonzero
	}
	all := []string{"n1", "n2", "n3"}
	var size int64
	for i, id := range []string{"n2", "n3"} {
		name := []string{"b1", "b2"}[i]
		if err := sc.nodes[id].admin.CreateBackup(ctx, "t", "c1", name, time.Now().Add(7*24*time.Hour)); err != nil {
			t.Fatal(err)
		}
		info, err := sc.nodes["n1"].admin.BackupInfo(ctx, "c1", name)
		if err != nil {
			t.Fatal(err)
		}
		size += info.SizeBytes
		// Scraped between the creates: the reporting node (n1, through
		// which neither was made) must not reuse the totals it read
		// before the second (the knob above: no reuse).
		if got, _ := sum(all, "ebbtable_backups", nil); got != float64(i+1) {
			t.Errorf("ready backups summed after %s was made through %s: %v, want %d", name, id, got, i+1)
		}
	}
	if got, _ := sum(all, "ebbtable_backup_operations_total", map[string]string{"op": "create", "result": "ok"}); got != 2 {
		t.Errorf("creates counted: %v, want 2", got)
	}
	if got, k := sum(all, "ebbtable_backups", nil); got != 2 || k != 1 {
		t.Errorf("ready backups summed: %v (from %d nodes), want 2 from 1", got, k)
	}
	if got, _ := sum(all, "ebbtable_backup_bytes", nil); got != float64(size) || size == 0 {
		t.Errorf("backup bytes summed: %v, want %d", got, size)
	}
	if err := sc.nodes["n1"].admin.RestoreTable(ctx, "r", "c1", "b1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := sum(all, "ebbtable_backup_operations_total", map[string]string{"op": "restore", "result": "ok"}); got != 1 {
		t.Errorf("restores counted: %v, want 1", got)
	}
	// The reporting node leaves: another reports.
	sc.nodes["n1"].stop()
	rest := []string{"n2", "n3"}
	testkit.Eventually(t, "another node to report the backups", 10*time.Second, func() (bool, string) {
		got, k := sum(rest, "ebbtable_backups", nil)
		return got == 2 && k == 1, "not yet"
	})
}
