package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"

	"cloud.google.com/go/iam/apiv1/iampb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// IAM policies: GetIamPolicy, SetIamPolicy and TestIamPermissions on
// instances, tables, backups and authorized views. Policies are a plain
// store here: kept durably per resource (instance metadata kind "iam", the
// resource name relative to its instance; "" for the instance itself) and
// returned as set, with an etag that SetIamPolicy checks. They are enforced
// in iamcheck.go when authentication is on; with it off every caller holds
// every permission, so TestIamPermissions returns what it was asked.

// kindIAM stores a resource's policy (proto-encoded iampb.Policy).
const kindIAM = "iam"

// iamKey splits a resource name into its instance and the rest.
func iamKey(resource string) (inst, rest string, err error) {
	p := strings.SplitN(resource, "/", 5)
	if len(p) < 4 {
		return "", "", fmt.Errorf("%w: %q is not an instance, table, backup or authorized view name", errInvalid, resource)
	}
	inst, err = parseInstance(strings.Join(p[:4], "/"))
	if err != nil {
		return "", "", err
	}
	if len(p) == 5 {
		rest = p[4]
	}
	return inst, rest, nil
}

// IAMPolicy returns the policy stored for resource (an instance, table,
// backup or authorized view name); a resource never given one has an empty
// policy (no bindings, no etag).
func (s *Server) IAMPolicy(resource string) (*iampb.Policy, error) {
	if s.clusterIAM(resource) { // clusteriam.go
		p, _, err := s.readIAM(resource)
		return p, err
	}
	inst, rest, err := iamKey(resource)
	if err != nil {
		return nil, err
	}
	pol := &iampb.Policy{}
	err = s.engine.InstanceMeta(kindIAM, inst, func(_, name string, v []byte) error {
		if name != rest {
			return nil
		}
		return proto.Unmarshal(v, pol)
	})
	return pol, err
}

// forgetIAM drops a deleted resource's policy, so a resource created again
// under its name starts with none.
func (s *Server) forgetIAM(resource string) error {
	if s.clusterIAM(resource) { // clusteriam.go
		return s.forgetClusterIAM(resource)
	}
	inst, rest, err := iamKey(resource)
	if err != nil {
		return err
	}
	return s.deleteMeta(kindIAM, inst, rest) // metarepl.go
}

// checkIAMResource answers NotFound for a resource that does not exist.
func (s *Server) checkIAMResource(resource string) error {
	inst, rest, err := iamKey(resource)
	if err != nil {
		return err
	}
	switch {
	case rest == "":
		return nil // every instance exists (see GetInstance)
	case strings.Contains(rest, "/backups/"):
		if s.clusterIAM(resource) { // clusteriam.go
			return s.checkClusterBackup(resource)
		}
		n, err := parseBackup(resource)
		if err != nil {
			return err
		}
		_, err = s.backups.Get(n)
		return err
	case strings.Contains(rest, "/authorizedViews/"):
		_, err := s.authorizedView(resource)
		return err
	case strings.HasPrefix(rest, "tables/"):
		ref, err := parseTable(resource)
		if err != nil {
			return err
		}
		_, err = s.engine.Table(ref.instance, ref.table)
		return err
	}
	return fmt.Errorf("%w: %q is not an instance, table, backup or authorized view name (of %s)", errInvalid, resource, inst)
}

func (s *Server) getIamPolicy(req *iampb.GetIamPolicyRequest) (*iampb.Policy, error) {
	if err := s.checkIAMResource(req.GetResource()); err != nil {
		return nil, toStatus(err)
	}
	p, err := s.IAMPolicy(req.GetResource())
	if err != nil {
		return nil, toStatus(err)
	}
	return p, nil
}

// setIamPolicy stores the policy. A policy carrying an etag must carry the
// stored one (Aborted otherwise: someone changed it since it was read), as
// Cloud IAM does; the stored policy gets a new etag.
func (s *Server) setIamPolicy(ctx context.Context, method string, req *iampb.SetIamPolicyRequest) (*iampb.Policy, error) {
	res := req.GetResource()
	if err := s.checkIAMResource(res); err != nil {
		return nil, toStatus(err)
	}
	if req.GetPolicy() == nil {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: SetIamPolicy needs a policy")
	}
	s.inst.iamMu.Lock()
	defer s.inst.iamMu.Unlock()
	old, rev, err := s.readIAM(res) // clusteriam.go
	if err != nil {
		return nil, toStatus(err)
	}
	p := proto.Clone(req.GetPolicy()).(*iampb.Policy)
	if len(p.Etag) > 0 && string(p.Etag) != string(old.Etag) {
		return nil, status.Errorf(codes.Aborted, "ebbtable: the policy of %s changed since it was read (etag mismatch); read it again and retry", res)
	}
	for _, b := range p.GetBindings() {
		if !strings.HasPrefix(b.GetRole(), "roles/") {
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: role %q is not a role name (roles/...)", b.GetRole())
		}
	}
	if err := s.keepsSetter(ctx, method, res, p); err != nil {
		return nil, err
	}
	var etag [8]byte
	binary.BigEndian.PutUint64(etag[:], uint64(s.opts.Clock.Now().UnixNano()))
	if string(etag[:]) == string(old.Etag) {
		etag[7]++
	}
	p.Etag = etag[:]
	v, err := proto.Marshal(p)
	if err != nil {
		return nil, toStatus(err)
	}
	if err := s.storeIAM(res, v, rev); err != nil {
		return nil, toStatus(err)
	}
	return p, nil
}

// testIamPermissions answers which of the permissions the caller holds:
// with authentication off, all of them; with it on, those its token's role
// reaches and the IAM policies on the resource's path grant (callerHolds).
func (s *Server) testIamPermissions(ctx context.Context, req *iampb.TestIamPermissionsRequest) (*iampb.TestIamPermissionsResponse, error) {
	if err := s.checkIAMResource(req.GetResource()); err != nil {
		return nil, toStatus(err)
	}
	for _, p := range req.GetPermissions() {
		if strings.ContainsAny(p, " *") || !strings.HasPrefix(p, "bigtable.") {
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: %q is not a Bigtable permission (bigtable.RESOURCE.VERB)", p)
		}
	}
	held, err := s.callerHolds(ctx, req.GetResource(), req.GetPermissions())
	if err != nil {
		return nil, toStatus(err)
	}
	return &iampb.TestIamPermissionsResponse{Permissions: held}, nil
}

func (a *adminServer) GetIamPolicy(ctx context.Context, req *iampb.GetIamPolicyRequest) (*iampb.Policy, error) {
	return a.s.getIamPolicy(req)
}

func (a *adminServer) SetIamPolicy(ctx context.Context, req *iampb.SetIamPolicyRequest) (*iampb.Policy, error) {
	return a.s.setIamPolicy(ctx, "/google.bigtable.admin.v2.BigtableTableAdmin/SetIamPolicy", req)
}

func (a *adminServer) TestIamPermissions(ctx context.Context, req *iampb.TestIamPermissionsRequest) (*iampb.TestIamPermissionsResponse, error) {
	return a.s.testIamPermissions(ctx, req)
}

func (a *instanceServer) GetIamPolicy(ctx context.Context, req *iampb.GetIamPolicyRequest) (*iampb.Policy, error) {
	return a.s.getIamPolicy(req)
}

func (a *instanceServer) SetIamPolicy(ctx context.Context, req *iampb.SetIamPolicyRequest) (*iampb.Policy, error) {
	return a.s.setIamPolicy(ctx, "/google.bigtable.admin.v2.BigtableInstanceAdmin/SetIamPolicy", req)
}

func (a *instanceServer) TestIamPermissions(ctx context.Context, req *iampb.TestIamPermissionsRequest) (*iampb.TestIamPermissionsResponse, error) {
	return a.s.testIamPermissions(ctx, req)
}
