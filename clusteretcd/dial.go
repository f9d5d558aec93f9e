package clusteretcd

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// ReconnectMax bounds the wait between a node's attempts to reach etcd
// again after it lost its connection. gRPC's default backoff grows 1.6×
// per failed attempt up to 2 minutes: after an outage of some seconds a
// node went on without etcd, its fence down, for seconds to minutes after
// etcd was back (TestReconnectsSoonAfterEtcdOutage). An attempt to a down
// etcd is a refused connection: cheap, even every second.
const ReconnectMax = time.Second

// clientConfig is the etcd client configuration of every client the
// package makes.
func clientConfig(endpoints []string, dialTimeout time.Duration) clientv3.Config {
	return clientv3.Config{Endpoints: endpoints, DialTimeout: dialTimeout, Context: context.Background(), Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: ReconnectMax},
			// gRPC's default: how long one attempt may take to connect.
			MinConnectTimeout: 20 * time.Second,
		})}}
}
