package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestEbbAdminBadRequests: the typed admin protocol's bad requests answer
// INVALID_ARGUMENT with a message naming what is wrong, and change nothing.
func TestEbbAdminBadRequests(t *testing.T) {
	t.Parallel()
	if EbbAdminService != ebbadminpb.EbbAdmin_ServiceDesc.ServiceName {
		t.Fatalf("EbbAdminService %q, the generated service %q", EbbAdminService, ebbadminpb.EbbAdmin_ServiceDesc.ServiceName)
	}
	env := newTestEnv(t)
	ctx := context.Background()
	env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.MaxAgePolicy(time.Hour)})
	conn, err := grpc.NewClient(env.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := ebbadminpb.NewEbbAdminClient(conn)
	bad := func(what string, err error, msg string) {
		t.Helper()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), msg) {
			t.Errorf("%s: %v, want InvalidArgument mentioning %q", what, err, msg)
		}
	}
	_, err = c.GcRun(ctx, &ebbadminpb.GcRunRequest{Table: "t"})
	bad("GcRun without project", err, "project and instance are required")
	_, err = c.GcPlan(ctx, &ebbadminpb.GcPlanRequest{Project: testProject, Instance: testInstance, Table: "t", Family: "f", Rule: "maxage=soon"})
	bad("GcPlan with a bad rule", err, "maxage")
	_, err = c.SetFamilyOptions(ctx, &ebbadminpb.SetFamilyOptionsRequest{Project: testProject, Instance: testInstance, Table: "t", Family: "f"})
	bad("SetFamilyOptions without expiry_timestamps", err, "expiry_timestamps (true or false) is required")
	_, err = c.GcHold(ctx, &ebbadminpb.GcHoldRequest{Project: testProject, Instance: testInstance, Table: "t", Family: "f", Hold: true, CollectAtNanos: proto.Int64(-5)})
	bad("GcHold at a negative time", err, "collect_at_nanos")
	_, err = c.Progress(ctx, &ebbadminpb.ProgressRequest{})
	bad("Progress without an id", err, "needs an id")
	_, err = c.Pull(ctx, &ebbadminpb.PullRequest{})
	bad("Pull without a caller", err, "calling cluster's id")
	_, err = c.Join(ctx, &ebbadminpb.JoinRequest{Cluster: "b"})
	bad("Join without an address", err, "id and address")

	// The bad GcHold held nothing: a coordinated raise's hold is still
	// free to take and the family's rule is unchanged.
	out, err := c.GcHold(ctx, &ebbadminpb.GcHoldRequest{Project: testProject, Instance: testInstance, Table: "t", Family: "f", Hold: false})
	if err != nil || out.GetRule() != bigtable.MaxAgePolicy(time.Hour).String() || out.GetHeld() {
		t.Errorf("GcHold release: %v %v", out, err)
	}
}
