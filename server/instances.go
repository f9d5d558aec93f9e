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
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Declared instances. Any instance a client names exists implicitly (as in
// the emulator), served by this process's cluster. CreateInstance declares
// one instead: its settings (display name, type, edition, labels) and its
// clusters are stored and returned as given, and every one of its clusters
// is served by this process (READY at once: there are no nodes to start).
// DeleteInstance removes the declaration, its clusters, app profiles and
// tables. See docs/compatibility.md.

// kindInstance stores a declared instance (protojson of adminpb.Instance)
// under the name "".
const kindInstance = "instance"

// declared returns the stored declaration of inst, or nil.
func (a *instanceServer) declared(inst string) (*adminpb.Instance, error) {
	var found *adminpb.Instance
	err := a.s.engine.InstanceMeta(kindInstance, inst, func(_, _ string, v []byte) error {
		p := &adminpb.Instance{}
		if err := protojson.Unmarshal(v, p); err != nil {
			return fmt.Errorf("ebbtable: instance %s: %w", inst, err)
		}
		found = p
		return nil
	})
	return found, err
}

// newCluster fills a requested cluster's defaults, as Bigtable reports
// them: READY, serve nodes at the autoscaling minimum when autoscaling is on.
func newCluster(inst, id string, in *adminpb.Cluster) *adminpb.Cluster {
	c := proto.Clone(in).(*adminpb.Cluster)
	if c == nil {
		c = &adminpb.Cluster{}
	}
	c.Name = inst + "/clusters/" + id
	c.State = adminpb.Cluster_READY
	if c.GetLocation() == "" {
		c.Location = "projects/" + projectOf(inst) + "/locations/" + localZone
	}
	if c.GetDefaultStorageType() == adminpb.StorageType_STORAGE_TYPE_UNSPECIFIED {
		c.DefaultStorageType = adminpb.StorageType_SSD
	}
	autoscaledNodes(c)
	return c
}

// autoscaledNodes sets serve nodes to the autoscaling minimum when the
// cluster autoscales and has fewer.
func autoscaledNodes(c *adminpb.Cluster) {
	if lim := c.GetClusterConfig().GetClusterAutoscalingConfig().GetAutoscalingLimits(); lim != nil && c.ServeNodes < lim.GetMinServeNodes() {
		c.ServeNodes = lim.GetMinServeNodes()
	}
	if c.ServeNodes == 0 {
		c.ServeNodes = 1
	}
}

func (a *instanceServer) CreateInstance(ctx context.Context, req *adminpb.CreateInstanceRequest) (*longrunningpb.Operation, error) {
	parent := req.GetParent()
	if !strings.HasPrefix(parent, "projects/") || strings.Count(parent, "/") != 1 || parent == "projects/" {
		return nil, status.Errorf(codes.InvalidArgument, "ebbtable: %q is not a project name (projects/PROJECT)", parent)
	}
	inst, err := parseInstance(parent + "/instances/" + req.GetInstanceId())
	if err != nil {
		return nil, toStatus(err)
	}
	if len(req.GetClusters()) == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "ebbtable: CreateInstance needs at least one cluster")
	}
	for id := range req.GetClusters() {
		if id == "" || strings.Contains(id, "/") {
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: invalid cluster id %q", id)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.syncMeta() // clustermeta.go
	if d, err := a.declared(inst); err != nil {
		return nil, toStatus(err)
	} else if d != nil {
		return nil, status.Errorf(codes.AlreadyExists, "ebbtable: instance %s already exists", inst)
	}
	p := proto.Clone(req.GetInstance()).(*adminpb.Instance)
	if p == nil {
		p = &adminpb.Instance{}
	}
	p.Name, p.State = inst, adminpb.Instance_READY
	if p.GetDisplayName() == "" {
		p.DisplayName = req.GetInstanceId()
	}
	if p.GetType() == adminpb.Instance_TYPE_UNSPECIFIED {
		p.Type = adminpb.Instance_PRODUCTION
	}
	now := timestamppb.New(a.s.opts.Clock.Now())
	p.CreateTime = now
	clusters := map[string]*adminpb.Cluster{}
	for id, c := range req.GetClusters() {
		clusters[id] = newCluster(inst, id, c)
	}
	if err := a.declareInstance(p, clusters); err != nil { // clustermeta.go: exactly one of concurrent creates wins
		return nil, toStatus(err)
	}
	return a.doneOp(inst, p, &adminpb.CreateInstanceMetadata{OriginalRequest: req, RequestTime: now, FinishTime: now})
}

// instanceInfo returns inst as declared, or as an implicit instance.
func (a *instanceServer) instanceInfo(inst string) (*adminpb.Instance, error) {
	d, err := a.declared(inst)
	if err != nil || d != nil {
		return d, err
	}
	return instanceProto(inst), nil
}

// updateInstance applies the fields named by paths from in to inst's
// declaration (an implicit instance becomes declared, with this process's
// cluster).
func (a *instanceServer) updateInstance(inst string, in *adminpb.Instance, paths []string) (*adminpb.Instance, error) {
	a.syncMeta() // clustermeta.go: update what any node declared last
	p, err := a.instanceInfo(inst)
	if err != nil {
		return nil, err
	}
	for _, path := range paths {
		switch path {
		case "display_name":
			if in.GetDisplayName() == "" {
				return nil, status.Errorf(codes.InvalidArgument, "ebbtable: an instance's display_name cannot be empty")
			}
			p.DisplayName = in.GetDisplayName()
		case "type":
			p.Type = in.GetType()
		case "edition":
			p.Edition = in.GetEdition()
		case "labels":
			p.Labels = in.GetLabels()
		default:
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: cannot update instance field %q", path)
		}
	}
	if d, err := a.declared(inst); err != nil {
		return nil, err
	} else if d == nil {
		// Declaring an implicit instance keeps the cluster it had.
		if err := a.putCluster(inst, a.s.opts.ClusterID, a.localCluster(inst)); err != nil {
			return nil, err
		}
	}
	if err := a.putInstance(p); err != nil {
		return nil, err
	}
	return p, nil
}

// UpdateInstance replaces display name, type and labels (Bigtable's full
// update).
func (a *instanceServer) UpdateInstance(ctx context.Context, req *adminpb.Instance) (*adminpb.Instance, error) {
	inst, err := parseInstance(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	p, err := a.updateInstance(inst, req, []string{"display_name", "type", "labels"})
	if err != nil {
		return nil, toStatus(err)
	}
	return p, nil
}

func (a *instanceServer) PartialUpdateInstance(ctx context.Context, req *adminpb.PartialUpdateInstanceRequest) (*longrunningpb.Operation, error) {
	inst, err := parseInstance(req.GetInstance().GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "ebbtable: PartialUpdateInstance needs an update_mask")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	p, err := a.updateInstance(inst, req.GetInstance(), paths)
	if err != nil {
		return nil, toStatus(err)
	}
	now := timestamppb.New(a.s.opts.Clock.Now())
	return a.doneOp(inst, p, &adminpb.UpdateInstanceMetadata{OriginalRequest: req, RequestTime: now, FinishTime: now})
}

// DeleteInstance removes a declared instance with its clusters, app
// profiles and tables. An instance never declared is NotFound.
func (a *instanceServer) DeleteInstance(ctx context.Context, req *adminpb.DeleteInstanceRequest) (*emptypb.Empty, error) {
	inst, err := parseInstance(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.syncMeta() // clustermeta.go
	d, err := a.declared(inst)
	if err != nil {
		return nil, toStatus(err)
	}
	if d == nil {
		return nil, status.Errorf(codes.NotFound, "ebbtable: instance %s not found (only instances made by CreateInstance can be deleted)", inst)
	}
	// In cluster mode the tables go through the schema log, on every node
	// (the lock is not held while the nodes apply it).
	a.mu.Unlock()
	err = a.dropClusterTables(ctx, inst) // clustermeta.go
	a.mu.Lock()
	if err != nil {
		return nil, err
	}
	for _, m := range a.s.engine.Tables(inst) {
		if err := a.s.engine.DeleteTable(inst, m.Name); err != nil {
			return nil, toStatus(err)
		}
	}
	for _, kind := range []string{kindCluster, kindAppProfile, kindAppProfileGone, kindAuthView, kindSchemaBundle, kindTableExt, kindIAM, kindInstance} {
		var names []string
		if err := a.s.engine.InstanceMeta(kind, inst, func(_, name string, _ []byte) error {
			names = append(names, name)
			return nil
		}); err != nil {
			return nil, toStatus(err)
		}
		for _, n := range names {
			del := a.s.engine.DeleteInstanceMeta
			if isStampedKind(kind) {
				del = a.s.deleteMeta // a tombstone that travels (metarepl.go)
			}
			if err := del(kind, inst, n); err != nil {
				return nil, toStatus(err)
			}
		}
	}
	if err := a.dropInstanceMeta(inst); err != nil { // clustermeta.go: on every node in cluster mode
		return nil, toStatus(err)
	}
	if err := a.s.forgetInstanceIAM(inst); err != nil { // clusteriam.go: etcd's, in cluster mode
		return nil, toStatus(err)
	}
	a.forgetProfiles()
	return &emptypb.Empty{}, nil
}
