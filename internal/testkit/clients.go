package testkit

import (
	"context"
	"testing"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Dial opens a plaintext gRPC connection to addr on loopback, closed at
// the test's cleanup.
func Dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Clients connects the official data and table-admin clients to a server
// at addr for project and instance, with an app profile ("" for the
// default), each over a connection of its own. Unlike
// BIGTABLE_EMULATOR_HOST it sets no environment, so tests using it may run
// in parallel. Both are closed at the test's cleanup.
func Clients(t testing.TB, addr, project, instance, profile string) (*bigtable.Client, *bigtable.AdminClient) {
	t.Helper()
	ctx := context.Background()
	client, err := bigtable.NewClientWithConfig(ctx, project, instance,
		bigtable.ClientConfig{AppProfile: profile, MetricsProvider: bigtable.NoopMetricsProvider{}},
		option.WithGRPCConn(Dial(t, addr)))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := bigtable.NewAdminClient(ctx, project, instance, option.WithGRPCConn(Dial(t, addr)))
	if err != nil {
		client.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		client.Close()
		admin.Close()
	})
	return client, admin
}

// InstanceAdmin connects the official instance-admin client to a server at
// addr; it is closed at the test's cleanup.
func InstanceAdmin(t testing.TB, addr, project string) *bigtable.InstanceAdminClient {
	t.Helper()
	iac, err := bigtable.NewInstanceAdminClient(context.Background(), project, option.WithGRPCConn(Dial(t, addr)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { iac.Close() })
	return iac
}

// Client connects the official data client to a server at addr with an
// app profile ("" for the default), over a connection of its own; both are
// closed at the test's cleanup.
func Client(t testing.TB, addr, project, instance, profile string) *bigtable.Client {
	t.Helper()
	client, err := bigtable.NewClientWithConfig(context.Background(), project, instance,
		bigtable.ClientConfig{AppProfile: profile, MetricsProvider: bigtable.NoopMetricsProvider{}},
		option.WithGRPCConn(Dial(t, addr)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

// Admin connects the official table-admin client to a server at addr,
// over a connection of its own; both are closed at the test's cleanup.
func Admin(t testing.TB, addr, project, instance string) *bigtable.AdminClient {
	t.Helper()
	admin, err := bigtable.NewAdminClient(context.Background(), project, instance, option.WithGRPCConn(Dial(t, addr)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	return admin
}
