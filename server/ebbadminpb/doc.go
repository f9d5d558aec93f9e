// Package ebbadminpb is ebbtable's own admin protocol,
// ebbtable.admin.v1.EbbAdmin: the messages and the gRPC service the server,
// the CLI and peer clusters share. The code is generated from
// proto/ebbtable/admin/v1/admin.proto; edit that file and run
// `go generate ./server/ebbadminpb`.
package ebbadminpb

//go:generate sh -c "cd ../.. && protoc --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --plugin=protoc-gen-go-grpc=$(go tool -n protoc-gen-go-grpc) --go_out=. --go_opt=module=github.com/ebbtable/ebbtable --go-grpc_out=. --go-grpc_opt=module=github.com/ebbtable/ebbtable -I proto proto/ebbtable/admin/v1/admin.proto"
