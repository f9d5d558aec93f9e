package server

import (
	"context"
	"fmt"
	"testing"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/iam"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestOtherMetadataReplicates: IAM policies, schema bundles, authorized
// views and declared instances made on one cluster appear on the other;
// a later change on either side wins on both; deletions travel.
func TestOtherMetadataReplicates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := startCluster(t, "a", "", "")
	b := startCluster(t, "b", a.srv.Addr(), "")
	if err := a.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", ColumnFamilies: map[string]bigtable.Family{"f": {}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "table t on b", func() (bool, string) { _, ok := b.meta(t, "t"); return ok, "" })

	// IAM: set on a, seen on b; changed on b, seen on a.
	setPolicy := func(c *cluster, member string) {
		t.Helper()
		h := c.admin.TableIAM("t")
		p, err := h.Policy(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range p.Members("roles/bigtable.reader") {
			p.Remove(m, "roles/bigtable.reader")
		}
		p.Add(member, "roles/bigtable.reader")
		if err := h.SetPolicy(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	readers := func(c *cluster) string {
		p, err := c.admin.TableIAM("t").Policy(ctx)
		if err != nil {
			return err.Error()
		}
		return fmt.Sprint(p.Members(iam.RoleName("roles/bigtable.reader")))
	}
	setPolicy(a, "user:alice@example.com")
	eventually(t, "a's policy on b", func() (bool, string) { got := readers(b); return got == "[user:alice@example.com]", got })
	setPolicy(b, "user:bob@example.com")
	eventually(t, "b's later policy on a", func() (bool, string) { got := readers(a); return got == "[user:bob@example.com]", got })

	// An authorized view made on a, deleted on b.
	if err := a.admin.CreateAuthorizedView(ctx, &bigtable.AuthorizedViewConf{TableID: "t", AuthorizedViewID: "v",
		AuthorizedView: &bigtable.SubsetViewConf{RowPrefixes: [][]byte{[]byte("r")}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the view on b", func() (bool, string) {
		_, err := b.admin.AuthorizedViewInfo(ctx, "t", "v")
		return err == nil, fmt.Sprint(err)
	})
	if err := b.admin.DeleteAuthorizedView(ctx, "t", "v"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the view gone on a", func() (bool, string) {
		_, err := a.admin.AuthorizedViewInfo(ctx, "t", "v")
		return err != nil, "still there"
	})

	// A schema bundle made on b.
	set := &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{protodesc.ToFileDescriptorProto(timestamppb.File_google_protobuf_timestamp_proto)}}
	desc, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.admin.CreateSchemaBundle(ctx, &bigtable.SchemaBundleConf{TableID: "t", SchemaBundleID: "sb", ProtoSchema: &bigtable.ProtoSchemaInfo{ProtoDescriptors: desc}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the schema bundle on a", func() (bool, string) {
		_, err := a.admin.GetSchemaBundle(ctx, "t", "sb")
		return err == nil, fmt.Sprint(err)
	})

	// A declared instance made on a.
	iacA := testkit.InstanceAdmin(t, a.srv.Addr(), testProject)
	iacB := testkit.InstanceAdmin(t, b.srv.Addr(), testProject)
	if err := iacA.CreateInstance(ctx, &bigtable.InstanceConf{InstanceId: "made", DisplayName: "made on a", ClusterId: "c1", Zone: "z"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the declared instance on b", func() (bool, string) {
		info, err := iacB.InstanceInfo(ctx, "made")
		if err != nil {
			return false, err.Error()
		}
		return info.DisplayName == "made on a", info.DisplayName
	})
}
