package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/bttest"
	"github.com/ebbtable/ebbtable/server"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Target names.
const (
	TargetEbbtable = "ebbtable"
	TargetEmulator = "emulator"
)

// Project and instance the benchmark clients use.
const (
	Project  = "bench"
	Instance = "bench"
)

// Endpoint is a Bigtable endpoint with official data and admin clients
// connected to it. Close closes the clients and, for endpoints started by
// this package, the server.
type Endpoint struct {
	Name   string
	Addr   string
	Client *bigtable.Client
	Admin  *bigtable.AdminClient

	conns []*grpc.ClientConn
	stop  func() error
}

// Dial connects a data and an admin client to the Bigtable endpoint at
// addr (host:port, plaintext). Each client gets its own gRPC connection,
// passed in with option.WithGRPCConn, so any number of endpoints can be
// used in one process (BIGTABLE_EMULATOR_HOST allows only one). Client-side
// metrics export is off.
func Dial(ctx context.Context, name, addr string) (*Endpoint, error) {
	e := &Endpoint{Name: name, Addr: addr}
	dial := func() (*grpc.ClientConn, error) {
		conn, err := grpc.NewClient("passthrough:///"+addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<28), grpc.MaxCallSendMsgSize(1<<28)),
		)
		if err == nil {
			e.conns = append(e.conns, conn)
		}
		return conn, err
	}
	dataConn, err := dial()
	if err != nil {
		return nil, fmt.Errorf("bench: dial %s: %w", addr, err)
	}
	e.Client, err = bigtable.NewClientWithConfig(ctx, Project, Instance,
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}},
		option.WithGRPCConn(dataConn))
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("bench: data client for %s: %w", addr, err)
	}
	adminConn, err := dial()
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("bench: dial %s: %w", addr, err)
	}
	e.Admin, err = bigtable.NewAdminClient(ctx, Project, Instance, option.WithGRPCConn(adminConn))
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("bench: admin client for %s: %w", addr, err)
	}
	return e, nil
}

// Close closes the clients, their connections and the server if this
// package started it.
func (e *Endpoint) Close() error {
	var errs []error
	if e.Client != nil {
		errs = append(errs, e.Client.Close())
	}
	if e.Admin != nil {
		errs = append(errs, e.Admin.Close())
	}
	// The clients close the connections they were given; this covers the
	// ones left over when Dial failed half way (errors from a second Close
	// are expected and ignored).
	for _, c := range e.conns {
		_ = c.Close()
	}
	if e.stop != nil {
		errs = append(errs, e.stop())
	}
	return errors.Join(errs...)
}

// StartEbbtable starts an in-process ebbtable server on 127.0.0.1 with the
// database in dir (default, durable settings, as serve runs them; metrics endpoint off) and
// connects clients to it. logger receives the server's log; nil discards
// everything below warnings.
func StartEbbtable(ctx context.Context, dir string, logger *slog.Logger) (*Endpoint, error) {
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	srv, err := server.New(server.Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: dir, Logger: logger, FullMemtable: true}) // as serve
	if err != nil {
		return nil, fmt.Errorf("bench: ebbtable: %w", err)
	}
	if err := srv.Start(); err != nil {
		srv.Close()
		return nil, fmt.Errorf("bench: ebbtable: %w", err)
	}
	e, err := Dial(ctx, TargetEbbtable, srv.Addr())
	if err != nil {
		srv.Close()
		return nil, err
	}
	e.stop = srv.Close
	return e, nil
}

// StartEmulator starts the reference in-memory emulator (bttest) on
// 127.0.0.1 and connects clients to it.
func StartEmulator(ctx context.Context) (*Endpoint, error) {
	srv, err := bttest.NewServer("127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: emulator: %w", err)
	}
	e, err := Dial(ctx, TargetEmulator, srv.Addr)
	if err != nil {
		srv.Close()
		return nil, err
	}
	e.stop = func() error { srv.Close(); return nil }
	return e, nil
}

// discardLogger is a logger that drops everything (for tests).
func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
