package server

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/ebbtable/ebbtable/replication"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Instance metadata kinds in the engine's metadata space (values are
// protojson of adminpb.Cluster and adminpb.AppProfile).
const (
	kindCluster    = "cluster"
	kindAppProfile = "appprofile"
	// kindAppProfileGone remembers a deleted app profile (value: the
	// deletion time in Unix nanoseconds, comparable with profile etags), so
	// a peer's older copy is not adopted back and the deletion travels.
	kindAppProfileGone = "appprofile-gone"
	// defaultProfile is the profile used when a request names none. It
	// exists in every instance unless the user stores one of that name.
	defaultProfile = "default"
	// localZone is the location reported for clusters: ebbtable has no zones.
	localZone = "ebbtable-local"
)

// instanceServer serves google.bigtable.admin.v2.BigtableInstanceAdmin.
// Instances are implicit: one per projects/P/instances/I seen in a table,
// cluster or app profile. Every instance has this process's cluster
// (Options.ClusterID); CreateCluster records further clusters durably but
// does not start them (see docs/replication.md).
type instanceServer struct {
	adminpb.UnimplementedBigtableInstanceAdminServer
	s  *Server
	mu sync.Mutex // serialises read-modify-write of instance metadata
	// creating holds CreateCluster operations waiting for a process with
	// the cluster's id to join, by cluster id.
	creating map[string][]*pendingOp
	// cache holds resolved profiles by instance and id (nil: none).
	cacheMu sync.Mutex
	cache   map[profileKey]*adminpb.AppProfile
	// iamMu serialises SetIamPolicy's read, etag check and write.
	iamMu sync.Mutex
}

func (a *instanceServer) localCluster(inst string) *adminpb.Cluster {
	return &adminpb.Cluster{
		Name:               inst + "/clusters/" + a.s.opts.ClusterID,
		Location:           "projects/" + projectOf(inst) + "/locations/" + localZone,
		State:              adminpb.Cluster_READY,
		ServeNodes:         1,
		DefaultStorageType: adminpb.StorageType_SSD,
	}
}

func projectOf(inst string) string {
	p := strings.Split(inst, "/")
	if len(p) > 1 {
		return p[1]
	}
	return ""
}

// clusters returns the instance's clusters: the local one, those stored
// and the peers.
func (a *instanceServer) clusters(inst string) ([]*adminpb.Cluster, error) {
	a.syncMeta() // clustermeta.go
	d, err := a.declared(inst)
	if err != nil {
		return nil, err
	}
	// An implicit instance always has this process's cluster; a declared
	// one has the clusters it declares (all served here).
	var out []*adminpb.Cluster
	local := -1
	if d == nil {
		out, local = []*adminpb.Cluster{a.localCluster(inst)}, 0
	}
	stored := map[string]*adminpb.Cluster{}
	err = a.s.engine.InstanceMeta(kindCluster, inst, func(_, name string, v []byte) error {
		c := &adminpb.Cluster{}
		if err := protojson.Unmarshal(v, c); err != nil {
			return fmt.Errorf("ebbtable: cluster %s/%s: %w", inst, name, err)
		}
		if name == a.s.opts.ClusterID && local >= 0 {
			// Settings recorded by UpdateCluster for this process's cluster.
			c.Name, c.State = out[local].Name, adminpb.Cluster_READY
			out[local] = c
			return nil
		}
		stored[name] = c
		out = append(out, c)
		return nil
	})
	// Peers (other processes of the instance) are clusters too: READY once
	// they finished their initial copy, CREATING before.
	for _, pi := range a.s.peers.list() {
		state := adminpb.Cluster_CREATING
		if pi.Ready {
			state = adminpb.Cluster_READY
		}
		if c, ok := stored[pi.ID]; ok {
			c.State = state
			continue
		}
		c := a.localCluster(inst)
		c.Name, c.State = inst+"/clusters/"+pi.ID, state
		out = append(out, c)
	}
	return out, err
}

func (a *instanceServer) cluster(inst, id string) (*adminpb.Cluster, error) {
	cs, err := a.clusters(inst)
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		if c.GetName() == inst+"/clusters/"+id {
			return c, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "ebbtable: cluster %s/clusters/%s not found", inst, id)
}

// instances lists every instance name this server knows.
func (a *instanceServer) instances() ([]string, error) {
	a.syncMeta() // clustermeta.go
	seen := map[string]bool{}
	for _, m := range a.s.engine.Tables("") {
		seen[m.Instance] = true
	}
	for _, kind := range []string{kindCluster, kindAppProfile, kindInstance} {
		if err := a.s.engine.InstanceMeta(kind, "", func(inst, _ string, _ []byte) error {
			seen[inst] = true
			return nil
		}); err != nil {
			return nil, err
		}
	}
	var out []string
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, nil
}

func instanceProto(name string) *adminpb.Instance {
	p := strings.Split(name, "/")
	return &adminpb.Instance{Name: name, DisplayName: p[len(p)-1], State: adminpb.Instance_READY, Type: adminpb.Instance_PRODUCTION}
}

func (a *instanceServer) GetInstance(ctx context.Context, req *adminpb.GetInstanceRequest) (*adminpb.Instance, error) {
	inst, err := parseInstance(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	// Every well-formed instance exists: ebbtable serves any instance a
	// client names, as the emulator does; a declared one as declared.
	a.syncMeta() // clustermeta.go: as declared through any node
	p, err := a.instanceInfo(inst)
	if err != nil {
		return nil, toStatus(err)
	}
	return p, nil
}

func (a *instanceServer) ListInstances(ctx context.Context, req *adminpb.ListInstancesRequest) (*adminpb.ListInstancesResponse, error) {
	names, err := a.instances()
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &adminpb.ListInstancesResponse{}
	for _, n := range names {
		if req.GetParent() == "" || strings.HasPrefix(n, req.GetParent()+"/") {
			p, err := a.instanceInfo(n)
			if err != nil {
				return nil, toStatus(err)
			}
			resp.Instances = append(resp.Instances, p)
		}
	}
	return resp, nil
}

// splitChild parses "<instance>/<coll>/<id>".
func splitChild(name, coll string) (inst, id string, err error) {
	i := strings.Index(name, "/"+coll+"/")
	if i < 0 {
		return "", "", fmt.Errorf("%w: %q is not a %s name (projects/P/instances/I/%s/ID)", errInvalid, name, coll, coll)
	}
	inst, err = parseInstance(name[:i])
	if err != nil {
		return "", "", err
	}
	id = name[i+len(coll)+2:]
	if id == "" || strings.Contains(id, "/") {
		return "", "", fmt.Errorf("%w: %q is not a %s name", errInvalid, name, coll)
	}
	return inst, id, nil
}

func (a *instanceServer) ListClusters(ctx context.Context, req *adminpb.ListClustersRequest) (*adminpb.ListClustersResponse, error) {
	var insts []string
	if strings.HasSuffix(req.GetParent(), "/instances/-") {
		all, err := a.instances()
		if err != nil {
			return nil, toStatus(err)
		}
		insts = all
	} else {
		inst, err := parseInstance(req.GetParent())
		if err != nil {
			return nil, toStatus(err)
		}
		insts = []string{inst}
	}
	resp := &adminpb.ListClustersResponse{}
	for _, inst := range insts {
		cs, err := a.clusters(inst)
		if err != nil {
			return nil, toStatus(err)
		}
		resp.Clusters = append(resp.Clusters, cs...)
	}
	return resp, nil
}

func (a *instanceServer) GetCluster(ctx context.Context, req *adminpb.GetClusterRequest) (*adminpb.Cluster, error) {
	inst, id, err := splitChild(req.GetName(), "clusters")
	if err != nil {
		return nil, toStatus(err)
	}
	c, err := a.cluster(inst, id)
	if err != nil {
		return nil, toStatus(err)
	}
	return c, nil
}

func (a *instanceServer) putCluster(inst, id string, c *adminpb.Cluster) error {
	v, err := protojson.Marshal(c)
	if err != nil {
		return err
	}
	return a.storeMeta("", kindCluster, inst, id, v) // clustermeta.go: cluster-wide in cluster mode
}

// CreateCluster records the cluster durably, CREATING, and returns a
// long-running operation that completes when a process with that cluster
// id has joined the instance and copied its data (serve --cluster-id ID
// --join ADDR); the cluster is READY from then on.
func (a *instanceServer) CreateCluster(ctx context.Context, req *adminpb.CreateClusterRequest) (*longrunningpb.Operation, error) {
	inst, err := parseInstance(req.GetParent())
	if err != nil {
		return nil, toStatus(err)
	}
	id := req.GetClusterId()
	if id == "" || strings.Contains(id, "/") {
		return nil, status.Errorf(codes.InvalidArgument, "ebbtable: invalid cluster id %q", id)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.cluster(inst, id); err == nil {
		return nil, status.Errorf(codes.AlreadyExists, "ebbtable: cluster %s/clusters/%s already exists", inst, id)
	}
	c := proto.Clone(req.GetCluster()).(*adminpb.Cluster)
	if c == nil {
		c = &adminpb.Cluster{}
	}
	c.Name = inst + "/clusters/" + id
	c.State = adminpb.Cluster_CREATING
	if p, ok := a.s.peers.get(id); ok && p.Ready {
		c.State = adminpb.Cluster_READY
	}
	if d, err := a.declared(inst); err != nil {
		return nil, toStatus(err)
	} else if d != nil {
		// A declared instance's clusters are all served by this process.
		c = newCluster(inst, id, c)
	}
	if c.GetLocation() == "" {
		c.Location = "projects/" + projectOf(inst) + "/locations/" + localZone
	}
	if err := a.createCluster(inst, id, c); err != nil { // clustermeta.go: exactly one of concurrent creates wins
		return nil, toStatus(err)
	}
	now := timestamppb.New(a.s.opts.Clock.Now())
	meta := &adminpb.CreateClusterMetadata{OriginalRequest: req, RequestTime: now}
	if c.State == adminpb.Cluster_READY {
		meta.FinishTime = now
		return a.doneOp(c.Name, c, meta)
	}
	op, err := a.s.ops.pending(c.Name, meta)
	if err != nil {
		return nil, err
	}
	if a.creating == nil {
		a.creating = map[string][]*pendingOp{}
	}
	a.creating[id] = append(a.creating[id], op)
	return op.wait(0), nil
}

func (a *instanceServer) UpdateCluster(ctx context.Context, req *adminpb.Cluster) (*longrunningpb.Operation, error) {
	inst, id, err := splitChild(req.GetName(), "clusters")
	if err != nil {
		return nil, toStatus(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.cluster(inst, id)
	if err != nil {
		return nil, toStatus(err)
	}
	c.ServeNodes = req.GetServeNodes()
	autoscaledNodes(c)
	if err := a.putCluster(inst, id, c); err != nil {
		return nil, toStatus(err)
	}
	now := timestamppb.New(a.s.opts.Clock.Now())
	return a.doneOp(c.Name, c, &adminpb.UpdateClusterMetadata{OriginalRequest: req, RequestTime: now, FinishTime: now})
}

// PartialUpdateCluster applies serve_nodes and the autoscaling config (the
// official client's UpdateCluster and SetAutoscaling use it). ebbtable has no
// nodes; the values are recorded and reported back.
func (a *instanceServer) PartialUpdateCluster(ctx context.Context, req *adminpb.PartialUpdateClusterRequest) (*longrunningpb.Operation, error) {
	inst, id, err := splitChild(req.GetCluster().GetName(), "clusters")
	if err != nil {
		return nil, toStatus(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.cluster(inst, id)
	if err != nil {
		return nil, toStatus(err)
	}
	for _, path := range req.GetUpdateMask().GetPaths() {
		switch path {
		case "serve_nodes":
			c.ServeNodes = req.GetCluster().GetServeNodes()
		case "cluster_config.cluster_autoscaling_config":
			c.Config = req.GetCluster().GetConfig()
		default:
			if !strings.HasPrefix(path, "cluster_config.cluster_autoscaling_config.") {
				return nil, status.Errorf(codes.InvalidArgument, "ebbtable: cannot update cluster field %q", path)
			}
			c.Config = req.GetCluster().GetConfig()
		}
	}
	autoscaledNodes(c)
	if err := a.putCluster(inst, id, c); err != nil {
		return nil, toStatus(err)
	}
	now := timestamppb.New(a.s.opts.Clock.Now())
	return a.doneOp(c.Name, c, &adminpb.PartialUpdateClusterMetadata{OriginalRequest: req, RequestTime: now, FinishTime: now})
}

func (a *instanceServer) DeleteCluster(ctx context.Context, req *adminpb.DeleteClusterRequest) (*emptypb.Empty, error) {
	inst, id, err := splitChild(req.GetName(), "clusters")
	if err != nil {
		return nil, toStatus(err)
	}
	if id == a.s.opts.ClusterID {
		return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: cluster %s is served by this process and cannot be deleted through it", req.GetName())
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.cluster(inst, id); err != nil {
		return nil, toStatus(err)
	}
	var users []string
	if err := a.s.engine.InstanceMeta(kindAppProfile, inst, func(_, name string, v []byte) error {
		p := &adminpb.AppProfile{}
		if err := protojson.Unmarshal(v, p); err != nil {
			return fmt.Errorf("ebbtable: app profile %s/%s: %w", inst, name, err)
		}
		if p.GetSingleClusterRouting().GetClusterId() == id {
			users = append(users, name)
		}
		return nil
	}); err != nil {
		return nil, toStatus(err)
	}
	if len(users) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: cluster %s is the single-cluster route of app profiles %v; change or delete them first", req.GetName(), users)
	}
	if err := a.dropMeta(kindCluster, inst, id); err != nil {
		return nil, toStatus(err)
	}
	// A joined cluster is forgotten too: no more pulling from it, and its
	// pulls are refused (stop its process; to come back it joins again
	// with an empty data directory).
	if _, ok := a.s.peers.get(id); ok {
		if err := a.s.peers.remove(id); err != nil {
			return nil, toStatus(err)
		}
	}
	return &emptypb.Empty{}, nil
}

// peerReady marks stored clusters with a joined peer's id READY.
func (a *instanceServer) peerReady(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ready []*adminpb.Cluster
	_ = a.s.engine.InstanceMeta(kindCluster, "", func(inst, name string, v []byte) error {
		c := &adminpb.Cluster{}
		if name == id && protojson.Unmarshal(v, c) == nil && c.State != adminpb.Cluster_READY {
			c.State = adminpb.Cluster_READY
			ready = append(ready, c)
		}
		return nil
	})
	for _, c := range ready {
		if inst, cid, err := splitChild(c.GetName(), "clusters"); err == nil {
			if err := a.putCluster(inst, cid, c); err != nil {
				a.s.log.Warn("cannot mark cluster ready", "cluster", c.GetName(), "err", err)
			}
		}
	}
	for _, op := range a.creating[id] {
		var c *adminpb.Cluster
		for _, r := range ready {
			if strings.HasSuffix(r.GetName(), "/clusters/"+id) {
				c = r
			}
		}
		if c == nil {
			c = &adminpb.Cluster{Name: id, State: adminpb.Cluster_READY}
		}
		op.finish(c, nil, nil)
	}
	delete(a.creating, id)
}

// adoptPeerMeta takes what replication.MergeMeta picks of a peer's
// clusters, app profiles and profile tombstones: those this cluster lacks
// or holds older (the later of a profile's change and its deletion wins on
// every cluster).
func (a *instanceServer) adoptPeerMeta(list []replication.MetaEntry) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	// What this cluster has, read once (every pull carries the peer's list).
	local, err := a.s.localMeta()
	if err != nil {
		return err
	}
	kinds := replication.MetaKinds{Cluster: kindCluster, Profile: kindAppProfile, ProfileGone: kindAppProfileGone}
	etag := func(v string) int64 { return profileEtag([]byte(v)) }
	for _, c := range replication.MergeMeta(a.s.opts.ClusterID, local, list, kinds, etag) {
		var err error
		if c.Replace == "" {
			err = a.s.engine.PutInstanceMeta(c.Kind, c.Instance, c.Name, []byte(c.Value))
		} else {
			err = a.s.engine.ReplaceInstanceMeta(c.Replace, c.Kind, c.Instance, c.Name, []byte(c.Value))
		}
		if err != nil {
			return err
		}
		a.forgetProfiles()
	}
	return a.s.adoptStampedMeta(list) // metarepl.go
}

// profileEtag is when a stored app profile last changed (its etag), or 0.
func profileEtag(v []byte) int64 {
	p := &adminpb.AppProfile{}
	if protojson.Unmarshal(v, p) != nil {
		return 0
	}
	t, _ := strconv.ParseInt(p.GetEtag(), 10, 64)
	return t
}

// ---- app profiles ----

func (a *instanceServer) defaultAppProfile(inst string) *adminpb.AppProfile {
	return &adminpb.AppProfile{
		Name:          inst + "/appProfiles/" + defaultProfile,
		Description:   "implicit default: single-cluster routing to this process's cluster, transactional writes allowed (as for a one-cluster Bigtable instance)",
		RoutingPolicy: &adminpb.AppProfile_SingleClusterRouting_{SingleClusterRouting: &adminpb.AppProfile_SingleClusterRouting{ClusterId: a.s.opts.ClusterID, AllowTransactionalWrites: true}},
	}
}

// withIsolationDefault gives a profile without isolation Bigtable's
// default: standard isolation at high priority.
func withIsolationDefault(p *adminpb.AppProfile) {
	if p.GetIsolation() == nil {
		p.Isolation = &adminpb.AppProfile_StandardIsolation_{StandardIsolation: &adminpb.AppProfile_StandardIsolation{Priority: adminpb.AppProfile_PRIORITY_HIGH}}
	}
	if si, ok := p.GetIsolation().(*adminpb.AppProfile_StandardIsolation_); ok && si.StandardIsolation.GetPriority() == adminpb.AppProfile_PRIORITY_UNSPECIFIED {
		si.StandardIsolation.Priority = adminpb.AppProfile_PRIORITY_HIGH
	}
}

// profileOut is a profile as the API returns it: with the isolation default
// and without the etag, which ebbtable keeps for ordering replicated
// profile changes (Bigtable's Get and List return none either).
func profileOut(p *adminpb.AppProfile) *adminpb.AppProfile {
	p = proto.Clone(p).(*adminpb.AppProfile)
	p.Etag = ""
	withIsolationDefault(p)
	return p
}

// profile returns (a copy of) the stored profile, the implicit default, or
// NotFound.
func (a *instanceServer) profile(inst, id string) (*adminpb.AppProfile, error) {
	a.syncMeta() // clustermeta.go
	p, err := a.cachedProfile(inst, id)
	if err != nil {
		return nil, err
	}
	return proto.Clone(p).(*adminpb.AppProfile), nil
}

// cachedProfile is profile without the copy, for the data path: every
// data RPC resolves its profile, so profiles are kept in memory (the cache
// is dropped whenever a profile is stored or deleted). The caller must not
// change the result.
func (a *instanceServer) cachedProfile(inst, id string) (*adminpb.AppProfile, error) {
	key := profileKey{inst, id} // no string built per call
	a.cacheMu.Lock()
	p, ok := a.cache[key]
	a.cacheMu.Unlock()
	if !ok {
		var err error
		if p, err = a.loadProfile(inst, id); err != nil {
			return nil, err
		}
		a.cacheMu.Lock()
		if a.cache == nil {
			a.cache = map[profileKey]*adminpb.AppProfile{}
		}
		a.cache[key] = p
		a.cacheMu.Unlock()
	}
	if p == nil {
		return nil, status.Errorf(codes.NotFound, "ebbtable: app profile %s/appProfiles/%s not found", inst, id)
	}
	return p, nil
}

// profileKey is the profile cache's key: an instance and a profile id.
type profileKey struct{ inst, id string }

// forgetProfiles drops the profile cache.
func (a *instanceServer) forgetProfiles() {
	a.cacheMu.Lock()
	a.cache = nil
	a.cacheMu.Unlock()
}

// loadProfile reads a profile from the engine: the stored one, the
// implicit default, or nil.
func (a *instanceServer) loadProfile(inst, id string) (*adminpb.AppProfile, error) {
	var found *adminpb.AppProfile
	err := a.s.engine.InstanceMeta(kindAppProfile, inst, func(_, name string, v []byte) error {
		if name != id {
			return nil
		}
		p := &adminpb.AppProfile{}
		if err := protojson.Unmarshal(v, p); err != nil {
			return fmt.Errorf("ebbtable: app profile %s/%s: %w", inst, name, err)
		}
		found = p
		return nil
	})
	if err != nil {
		return nil, err
	}
	if found == nil && id == defaultProfile {
		found = a.defaultAppProfile(inst)
	}
	return found, nil
}

// checkRouting validates a profile's routing policy against the instance's
// clusters.
func (a *instanceServer) checkRouting(inst string, p *adminpb.AppProfile) error {
	switch r := p.GetRoutingPolicy().(type) {
	case *adminpb.AppProfile_SingleClusterRouting_:
		if _, err := a.cluster(inst, r.SingleClusterRouting.GetClusterId()); err != nil {
			return status.Errorf(codes.InvalidArgument, "ebbtable: single-cluster routing names unknown cluster %q", r.SingleClusterRouting.GetClusterId())
		}
	case *adminpb.AppProfile_MultiClusterRoutingUseAny_:
		for _, id := range r.MultiClusterRoutingUseAny.GetClusterIds() {
			if _, err := a.cluster(inst, id); err != nil {
				return status.Errorf(codes.InvalidArgument, "ebbtable: multi-cluster routing names unknown cluster %q", id)
			}
		}
	case nil:
		return status.Errorf(codes.InvalidArgument, "ebbtable: app profile needs a routing policy")
	}
	return nil
}

func (a *instanceServer) putProfile(inst, id string, p *adminpb.AppProfile, create bool) error {
	p.Etag = fmt.Sprintf("%d", a.s.opts.Clock.Now().UnixNano())
	v, err := protojson.Marshal(p)
	if err != nil {
		return err
	}
	defer a.forgetProfiles()
	// A profile created again after a deletion replaces its tombstone.
	if create {
		return a.createMeta(kindAppProfileGone, kindAppProfile, inst, id, v) // clustermeta.go: exactly one of concurrent creates wins
	}
	return a.storeMeta(kindAppProfileGone, kindAppProfile, inst, id, v) // clustermeta.go
}

func (a *instanceServer) CreateAppProfile(ctx context.Context, req *adminpb.CreateAppProfileRequest) (*adminpb.AppProfile, error) {
	inst, err := parseInstance(req.GetParent())
	if err != nil {
		return nil, toStatus(err)
	}
	id := req.GetAppProfileId()
	if id == "" || strings.Contains(id, "/") {
		return nil, status.Errorf(codes.InvalidArgument, "ebbtable: invalid app profile id %q", id)
	}
	p := proto.Clone(req.GetAppProfile()).(*adminpb.AppProfile)
	if p == nil {
		p = &adminpb.AppProfile{}
	}
	p.Name = inst + "/appProfiles/" + id
	withIsolationDefault(p)
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.profile(inst, id); err == nil {
		return nil, status.Errorf(codes.AlreadyExists, "ebbtable: app profile %s already exists", p.Name)
	}
	if err := a.checkRouting(inst, p); err != nil {
		return nil, err
	}
	if err := a.putProfile(inst, id, p, true); err != nil {
		return nil, toStatus(err)
	}
	return profileOut(p), nil
}

func (a *instanceServer) GetAppProfile(ctx context.Context, req *adminpb.GetAppProfileRequest) (*adminpb.AppProfile, error) {
	inst, id, err := splitChild(req.GetName(), "appProfiles")
	if err != nil {
		return nil, toStatus(err)
	}
	p, err := a.profile(inst, id)
	if err != nil {
		return nil, toStatus(err)
	}
	return profileOut(p), nil
}

func (a *instanceServer) ListAppProfiles(ctx context.Context, req *adminpb.ListAppProfilesRequest) (*adminpb.ListAppProfilesResponse, error) {
	inst, err := parseInstance(req.GetParent())
	if err != nil {
		return nil, toStatus(err)
	}
	a.syncMeta() // clustermeta.go
	resp := &adminpb.ListAppProfilesResponse{}
	hasDefault := false
	err = a.s.engine.InstanceMeta(kindAppProfile, inst, func(_, name string, v []byte) error {
		p := &adminpb.AppProfile{}
		if err := protojson.Unmarshal(v, p); err != nil {
			return fmt.Errorf("ebbtable: app profile %s/%s: %w", inst, name, err)
		}
		hasDefault = hasDefault || name == defaultProfile
		resp.AppProfiles = append(resp.AppProfiles, profileOut(p))
		return nil
	})
	if err != nil {
		return nil, toStatus(err)
	}
	if !hasDefault {
		resp.AppProfiles = append([]*adminpb.AppProfile{profileOut(a.defaultAppProfile(inst))}, resp.AppProfiles...)
	}
	return resp, nil
}

func (a *instanceServer) UpdateAppProfile(ctx context.Context, req *adminpb.UpdateAppProfileRequest) (*longrunningpb.Operation, error) {
	inst, id, err := splitChild(req.GetAppProfile().GetName(), "appProfiles")
	if err != nil {
		return nil, toStatus(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	p, err := a.profile(inst, id)
	if err != nil {
		return nil, toStatus(err)
	}
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "ebbtable: A non-empty 'update_mask' must be specified (UpdateAppProfile)")
	}
	in := req.GetAppProfile()
	for _, path := range paths {
		switch path {
		case "description":
			p.Description = in.GetDescription()
		case "multi_cluster_routing_use_any", "single_cluster_routing":
			p.RoutingPolicy = in.GetRoutingPolicy()
		case "priority", "standard_isolation", "data_boost_isolation_read_only":
			p.Isolation = in.GetIsolation()
			withIsolationDefault(p)
		default:
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: cannot update app profile field %q", path)
		}
	}
	if err := a.checkRouting(inst, p); err != nil {
		return nil, err
	}
	if err := a.putProfile(inst, id, p, false); err != nil {
		return nil, toStatus(err)
	}
	return a.doneOp(p.Name, profileOut(p), &adminpb.UpdateAppProfileMetadata{})
}

func (a *instanceServer) DeleteAppProfile(ctx context.Context, req *adminpb.DeleteAppProfileRequest) (*emptypb.Empty, error) {
	inst, id, err := splitChild(req.GetName(), "appProfiles")
	if err != nil {
		return nil, toStatus(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.profile(inst, id); err != nil {
		return nil, toStatus(err)
	}
	defer a.forgetProfiles()
	gone := strconv.FormatInt(a.s.opts.Clock.Now().UnixNano(), 10)
	if err := a.storeMeta(kindAppProfile, kindAppProfileGone, inst, id, []byte(gone)); err != nil {
		return nil, toStatus(err)
	}
	return &emptypb.Empty{}, nil
}

// checkProfile resolves a data request's app profile. An empty id means
// the instance's default profile. An id that names no profile is NotFound.
// A transactional request (CheckAndMutateRow, ReadModifyWriteRow) through a
// single-cluster profile without allow_transactional_writes is refused with
// FailedPrecondition, as Bigtable does; so is one through a multi-cluster
// profile (Bigtable allows single-row transactions only with single-cluster
// routing). It returns the profile for routing (see routing.go).
func (a *instanceServer) checkProfile(inst, id string, transactional bool) (*adminpb.AppProfile, error) {
	if id == "" {
		id = defaultProfile
	}
	p, err := a.cachedProfile(inst, id)
	if err != nil {
		var st interface{ GRPCStatus() *status.Status }
		if errors.As(err, &st) {
			return nil, err
		}
		return nil, toStatus(err)
	}
	if !transactional {
		return p, nil
	}
	sc, ok := p.GetRoutingPolicy().(*adminpb.AppProfile_SingleClusterRouting_)
	if !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: app profile %s uses multi-cluster routing; transactional writes (CheckAndMutateRow, ReadModifyWriteRow) need single-cluster routing with allow_transactional_writes", p.GetName())
	}
	if !sc.SingleClusterRouting.GetAllowTransactionalWrites() {
		return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: app profile %s does not allow transactional writes (CheckAndMutateRow, ReadModifyWriteRow); enable allow_transactional_writes on its single-cluster routing", p.GetName())
	}
	return p, nil
}
