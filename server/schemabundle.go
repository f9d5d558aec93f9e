package server

import (
	"context"
	"fmt"
	"strings"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Schema bundles: protobuf schemas attached to a table (for SQL over
// PROTO-typed columns). CRUD with etags; the descriptors are validated as
// a FileDescriptorSet whose files link. Stored as instance metadata (kind
// "schemabundle", name "tables/T/schemaBundles/B", protojson of
// adminpb.SchemaBundle) and go with their table.

const kindSchemaBundle = "schemabundle"

func parseSchemaBundle(name string) (ref tableRef, key string, err error) {
	i := strings.Index(name, "/schemaBundles/")
	if i < 0 {
		return tableRef{}, "", fmt.Errorf("%w: %q is not a schema bundle name (projects/P/instances/I/tables/T/schemaBundles/B)", errInvalid, name)
	}
	if ref, err = parseTable(name[:i]); err != nil {
		return tableRef{}, "", err
	}
	id := name[i+len("/schemaBundles/"):]
	if id == "" || strings.Contains(id, "/") {
		return tableRef{}, "", fmt.Errorf("%w: %q is not a schema bundle name", errInvalid, name)
	}
	return ref, "tables/" + ref.table + "/schemaBundles/" + id, nil
}

func (s *Server) schemaBundle(name string) (tableRef, string, *adminpb.SchemaBundle, error) {
	ref, key, err := parseSchemaBundle(name)
	if err != nil {
		return ref, key, nil, err
	}
	if _, err := s.engine.Table(ref.instance, ref.table); err != nil {
		return ref, key, nil, err
	}
	var found *adminpb.SchemaBundle
	err = s.engine.InstanceMeta(kindSchemaBundle, ref.instance, func(_, n string, v []byte) error {
		if n != key {
			return nil
		}
		found = &adminpb.SchemaBundle{}
		return protojson.Unmarshal(v, found)
	})
	if err == nil && found == nil {
		err = status.Errorf(codes.NotFound, "ebbtable: schema bundle %s not found", name)
	}
	return ref, key, found, err
}

func (s *Server) putSchemaBundle(ref tableRef, key string, b *adminpb.SchemaBundle) error {
	b.Etag = fmt.Sprintf("%d", s.opts.Clock.Now().UnixNano())
	v, err := protojson.Marshal(b)
	if err != nil {
		return err
	}
	return s.putMeta(kindSchemaBundle, ref.instance, key, v) // metarepl.go
}

// forgetTableBundles removes a deleted table's schema bundles.
func (s *Server) forgetTableBundles(ref tableRef) error {
	prefix := "tables/" + ref.table + "/schemaBundles/"
	var keys []string
	if err := s.engine.InstanceMeta(kindSchemaBundle, ref.instance, func(_, n string, _ []byte) error {
		if strings.HasPrefix(n, prefix) {
			keys = append(keys, n)
		}
		return nil
	}); err != nil {
		return err
	}
	for _, k := range keys {
		if err := s.deleteMeta(kindSchemaBundle, ref.instance, k); err != nil {
			return err
		}
	}
	return nil
}

// checkProtoSchema validates a bundle's descriptors: a serialized
// FileDescriptorSet whose files resolve against each other.
func checkProtoSchema(b *adminpb.SchemaBundle) error {
	ps := b.GetProtoSchema()
	if ps == nil {
		return status.Error(codes.InvalidArgument, "ebbtable: a schema bundle needs a proto_schema")
	}
	set := &descriptorpb.FileDescriptorSet{}
	if err := proto.Unmarshal(ps.GetProtoDescriptors(), set); err != nil {
		return status.Errorf(codes.InvalidArgument, "ebbtable: proto_descriptors is not a FileDescriptorSet: %v", err)
	}
	if len(set.GetFile()) == 0 {
		return status.Error(codes.InvalidArgument, "ebbtable: proto_descriptors holds no files")
	}
	if _, err := protodesc.NewFiles(set); err != nil {
		return status.Errorf(codes.InvalidArgument, "ebbtable: proto_descriptors do not resolve: %v", err)
	}
	return nil
}

func (a *adminServer) CreateSchemaBundle(ctx context.Context, req *adminpb.CreateSchemaBundleRequest) (*longrunningpb.Operation, error) {
	name := req.GetParent() + "/schemaBundles/" + req.GetSchemaBundleId()
	ref, key, err := parseSchemaBundle(name)
	if err != nil {
		return nil, toStatus(err)
	}
	if _, err := a.s.engine.Table(ref.instance, ref.table); err != nil {
		return nil, toStatus(err)
	}
	b := proto.Clone(req.GetSchemaBundle()).(*adminpb.SchemaBundle)
	if b == nil {
		b = &adminpb.SchemaBundle{}
	}
	b.Name = name
	if err := checkProtoSchema(b); err != nil {
		return nil, err
	}
	a.s.inst.mu.Lock()
	defer a.s.inst.mu.Unlock()
	if _, _, _, err := a.s.schemaBundle(name); err == nil {
		return nil, status.Errorf(codes.AlreadyExists, "ebbtable: schema bundle %s already exists", name)
	}
	if err := a.s.putSchemaBundle(ref, key, b); err != nil {
		return nil, toStatus(err)
	}
	now := timestamppb.New(a.s.opts.Clock.Now())
	return a.s.ops.done(name, b, &adminpb.CreateSchemaBundleMetadata{Name: name, StartTime: now, EndTime: now})
}

func (a *adminServer) GetSchemaBundle(ctx context.Context, req *adminpb.GetSchemaBundleRequest) (*adminpb.SchemaBundle, error) {
	_, _, b, err := a.s.schemaBundle(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	return b, nil
}

func (a *adminServer) ListSchemaBundles(ctx context.Context, req *adminpb.ListSchemaBundlesRequest) (*adminpb.ListSchemaBundlesResponse, error) {
	ref, err := parseTable(req.GetParent())
	if err != nil {
		return nil, toStatus(err)
	}
	if _, err := a.s.engine.Table(ref.instance, ref.table); err != nil {
		return nil, toStatus(err)
	}
	prefix := "tables/" + ref.table + "/schemaBundles/"
	resp := &adminpb.ListSchemaBundlesResponse{}
	err = a.s.engine.InstanceMeta(kindSchemaBundle, ref.instance, func(_, n string, v []byte) error {
		if !strings.HasPrefix(n, prefix) {
			return nil
		}
		b := &adminpb.SchemaBundle{}
		if err := protojson.Unmarshal(v, b); err != nil {
			return err
		}
		resp.SchemaBundles = append(resp.SchemaBundles, b)
		return nil
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return resp, nil
}

// UpdateSchemaBundle replaces proto_schema (the only updatable field). A
// bundle carrying an etag must carry the stored one.
func (a *adminServer) UpdateSchemaBundle(ctx context.Context, req *adminpb.UpdateSchemaBundleRequest) (*longrunningpb.Operation, error) {
	in := req.GetSchemaBundle()
	a.s.inst.mu.Lock()
	defer a.s.inst.mu.Unlock()
	ref, key, b, err := a.s.schemaBundle(in.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	if in.GetEtag() != "" && in.GetEtag() != b.GetEtag() {
		return nil, status.Errorf(codes.Aborted, "ebbtable: schema bundle %s changed since it was read (etag mismatch)", in.GetName())
	}
	for _, p := range req.GetUpdateMask().GetPaths() {
		if p != "proto_schema" {
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: cannot update schema bundle field %q (proto_schema can be updated)", p)
		}
	}
	b.Type = in.GetType()
	if err := checkProtoSchema(b); err != nil {
		return nil, err
	}
	if err := a.s.putSchemaBundle(ref, key, b); err != nil {
		return nil, toStatus(err)
	}
	now := timestamppb.New(a.s.opts.Clock.Now())
	return a.s.ops.done(b.Name, b, &adminpb.UpdateSchemaBundleMetadata{Name: b.Name, StartTime: now, EndTime: now})
}

func (a *adminServer) DeleteSchemaBundle(ctx context.Context, req *adminpb.DeleteSchemaBundleRequest) (*emptypb.Empty, error) {
	a.s.inst.mu.Lock()
	defer a.s.inst.mu.Unlock()
	ref, key, b, err := a.s.schemaBundle(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	if req.GetEtag() != "" && req.GetEtag() != b.GetEtag() {
		return nil, status.Errorf(codes.Aborted, "ebbtable: schema bundle %s changed since it was read (etag mismatch)", req.GetName())
	}
	if err := a.s.deleteMeta(kindSchemaBundle, ref.instance, key); err != nil {
		return nil, toStatus(err)
	}
	return &emptypb.Empty{}, nil
}
