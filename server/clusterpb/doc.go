// Package clusterpb is the protocol of cluster mode,
// ebbtable.cluster.v1.Cluster: the messages and the gRPC service the nodes
// of a cluster and the CLI share. The code is generated from
// proto/ebbtable/cluster/v1/cluster.proto; edit that file and run
// `go generate ./server/clusterpb`.
package clusterpb

//go:generate sh -c "cd ../.. && protoc --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --plugin=protoc-gen-go-grpc=$(go tool -n protoc-gen-go-grpc) --go_out=. --go_opt=module=github.com/ebbtable/ebbtable --go-grpc_out=. --go-grpc_opt=module=github.com/ebbtable/ebbtable -I proto proto/ebbtable/cluster/v1/cluster.proto"
