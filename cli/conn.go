package cli

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/spf13/cobra"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// defaultAddr is where client commands look for a server when no flag,
// ~/.cbtrc or environment variable says otherwise.
const defaultAddr = "localhost:8086"

// connFlags are the flags every client command takes to reach a server.
// Settings no flag gives come from ~/.cbtrc and the environment (resolve).
type connFlags struct {
	addr     string
	project  string
	instance string
	timeout  time.Duration

	appProfile string // cbt's app-profile= argument, for data clients

	resolved   bool
	resolveErr error
	// sec: TLS and token flags (conn_security.go).
	sec connSecurity
}

// register adds the connection flags to cmd as persistent flags.
func (f *connFlags) register(cmd *cobra.Command) {
	fl := cmd.PersistentFlags()
	fl.StringVar(&f.addr, "addr", "", "gRPC address of the server, HOST:PORT (default: $EBBTABLE_ADDR, $BIGTABLE_EMULATOR_HOST, ~/.cbtrc data-endpoint, else "+defaultAddr+")")
	fl.StringVar(&f.project, "project", "", "project ID in resource names (default: ~/.cbtrc project, $EBBTABLE_PROJECT, else "+defaultID+")")
	fl.StringVar(&f.instance, "instance", "", "instance ID in resource names (default: ~/.cbtrc instance, $EBBTABLE_INSTANCE, else "+defaultID+")")
	fl.DurationVar(&f.timeout, "timeout", 0, "give up after this long (default: ~/.cbtrc timeout, else no limit)")
	f.sec.register(cmd)
}

// endpoint is the server address to dial.
func (f *connFlags) endpoint() string {
	f.resolve()
	return f.addr
}

// context bounds a command's RPCs by --timeout, if set.
func (f *connFlags) context(parent context.Context) (context.Context, context.CancelFunc) {
	f.resolve()
	if f.timeout <= 0 {
		return context.WithCancel(parent)
	}
	return context.WithTimeout(parent, f.timeout)
}

// dial opens a plaintext connection the way the official client does in
// emulator mode (no TLS, no credentials, no name resolution beyond the
// address itself) and waits until it is up. Handing the clients a pre-dialed connection also keeps
// them off Google-only machinery (session data plane, DirectPath, channel
// pool probes).
func (f *connFlags) dial(ctx context.Context) (*grpc.ClientConn, error) {
	if err := f.resolve(); err != nil {
		return nil, err
	}
	addr := f.endpoint()
	secOpts, err := f.sec.dialOptions(addr)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, append(secOpts,
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<28), grpc.MaxCallSendMsgSize(1<<28)),
	)...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	if err := waitReady(ctx, conn, addr); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// connectTimeout bounds the wait for a connection, so that a command aimed
// at the wrong address fails fast instead of retrying until --timeout.
const connectTimeout = 5 * time.Second

// waitReady connects conn and waits until it is ready or has failed once.
func waitReady(ctx context.Context, conn *grpc.ClientConn, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn.Connect()
	for {
		state := conn.GetState()
		switch state {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure, connectivity.Shutdown:
			return fmt.Errorf("cannot connect to %s (is ebbtable serve running there? see --addr)", addr)
		}
		if !conn.WaitForStateChange(ctx, state) {
			return fmt.Errorf("cannot connect to %s within %v: %w", addr, connectTimeout, ctx.Err())
		}
	}
}

// dataClient connects a Data API client. Close it when done.
func (f *connFlags) dataClient(ctx context.Context) (*bigtable.Client, error) {
	conn, err := f.dial(ctx)
	if err != nil {
		return nil, err
	}
	c, err := bigtable.NewClientWithConfig(ctx, f.project, f.instance,
		bigtable.ClientConfig{AppProfile: f.appProfile, MetricsProvider: bigtable.NoopMetricsProvider{}, DisableSession: true},
		option.WithGRPCConn(conn), option.WithoutAuthentication())
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("data client for %s: %w", f.endpoint(), err)
	}
	return c, nil
}

// adminClient connects a Table Admin API client. Close it when done.
func (f *connFlags) adminClient(ctx context.Context) (*bigtable.AdminClient, error) {
	conn, err := f.dial(ctx)
	if err != nil {
		return nil, err
	}
	c, err := bigtable.NewAdminClient(ctx, f.project, f.instance, option.WithGRPCConn(conn), option.WithoutAuthentication())
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("admin client for %s: %w", f.endpoint(), err)
	}
	return c, nil
}

// withAdmin runs fn with the command's context (bounded by --timeout) and a
// connected admin client, and closes both afterwards.
func (f *connFlags) withAdmin(cmd *cobra.Command, fn func(ctx context.Context, admin *bigtable.AdminClient) error) error {
	ctx, cancel := f.context(cmd.Context())
	defer cancel()
	admin, err := f.adminClient(ctx)
	if err != nil {
		return err
	}
	defer admin.Close()
	return fn(ctx, admin)
}
