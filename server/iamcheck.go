package server

import (
	"context"
	"fmt"
	"strings"

	"cloud.google.com/go/iam/apiv1/iampb"
	"github.com/ebbtable/ebbtable/auth"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// IAM enforcement (docs/security.md, "IAM policies"): with authentication
// on, once the token's role allows a call, every resource the request names
// is checked against the IAM policies on its path (an authorized view, its
// table, the instance; a backup, its instance). Where any of them holds a
// binding, one must grant a member of the token a role holding the method's
// permission. Where none does, the token's role alone decides.

// principalKey carries a unary call's auth.Principal to its handler.
type principalKey struct{}

func withPrincipal(ctx context.Context, p auth.Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

func principalOf(ctx context.Context) auth.Principal {
	p, _ := ctx.Value(principalKey{}).(auth.Principal)
	return p
}

// iamRes is one resource on a path: its name relative to its instance (""
// for the instance), and its kind.
type iamRes struct{ rest, kind string }

// iamPath is the instance and the resources from name up to the instance,
// most specific first; ok false when name is no instance's.
func iamPath(name string) (inst string, path []iamRes, ok bool) {
	name = strings.TrimPrefix(name, "operations/")
	p := strings.Split(name, "/")
	if len(p) < 4 || p[0] != "projects" || p[2] != "instances" || p[1] == "" || p[3] == "" {
		return "", nil, false
	}
	inst = strings.Join(p[:4], "/")
	switch {
	case len(p) >= 6 && p[4] == "tables" && p[5] != "":
		table := "tables/" + p[5]
		if len(p) >= 8 && p[6] == "authorizedViews" && p[7] != "" {
			path = append(path, iamRes{table + "/authorizedViews/" + p[7], "authorizedViews"})
		}
		path = append(path, iamRes{table, "tables"})
	case len(p) >= 8 && p[4] == "clusters" && p[6] == "backups" && p[7] != "":
		path = append(path, iamRes{"clusters/" + p[5] + "/backups/" + p[7], "backups"})
	}
	return inst, append(path, iamRes{"", "instances"}), true
}

// resourcesOf lists the resource names a request names: string fields
// holding projects/… names (operations/… too), in singular nested messages
// as instancesOf walks them; for ebbtable's own admin requests, their
// project, instance and table fields.
func resourcesOf(req any) []string {
	m, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	if isAdminMessage(m) {
		r, ok := m.(instanceRequest)
		if !ok || r.GetProject() == "" || r.GetInstance() == "" {
			return nil
		}
		name := "projects/" + r.GetProject() + "/instances/" + r.GetInstance()
		if t, ok := m.(tableRequest); ok && t.GetTable() != "" {
			name += "/tables/" + t.GetTable()
		}
		return []string{name}
	}
	var out []string
	walkResources(m.ProtoReflect(), 0, &out)
	return out
}

func walkResources(m protoreflect.Message, depth int, out *[]string) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() || fd.IsMap():
		case fd.Kind() == protoreflect.StringKind:
			if instanceOfName(v.String()) != "" {
				*out = append(*out, v.String())
			}
		case fd.Kind() == protoreflect.MessageKind && depth < 3:
			walkResources(v.Message(), depth+1, out)
		}
		return true
	})
}

// iamPolicies reads the policies stored for the resources of path in one
// scan of inst's policies; those with no bindings are left out.
func (s *Server) iamPolicies(inst string, path []iamRes) (map[string]*iampb.Policy, error) {
	return s.iamPoliciesCtx(context.Background(), inst, path)
}

// iamPoliciesCtx is iamPolicies for a request with ctx (whose deadline
// bounds a cluster node's etcd read).
func (s *Server) iamPoliciesCtx(ctx context.Context, inst string, path []iamRes) (map[string]*iampb.Policy, error) {
	if s.cluster != nil { // kept in etcd: clusteriam.go
		rest := make([]string, len(path))
		for i, r := range path {
			rest[i] = r.rest
		}
		return s.clusterIAMPolicies(ctx, inst, rest)
	}
	want := make(map[string]bool, len(path))
	for _, r := range path {
		want[r.rest] = true
	}
	out := map[string]*iampb.Policy{}
	err := s.engine.InstanceMeta(kindIAM, inst, func(_, name string, v []byte) error {
		if !want[name] {
			return nil
		}
		p := &iampb.Policy{}
		if err := proto.Unmarshal(v, p); err != nil {
			return err
		}
		if len(p.GetBindings()) > 0 {
			out[name] = p
		}
		return nil
	})
	return out, err
}

func bindingsOf(p *iampb.Policy) []auth.Binding {
	out := make([]auth.Binding, len(p.GetBindings()))
	for i, b := range p.GetBindings() {
		out[i] = auth.Binding{Role: b.GetRole(), Members: b.GetMembers(), Conditional: b.GetCondition() != nil}
	}
	return out
}

// iamDecision is what the policies on one resource's path say.
type iamDecision struct {
	// governed: some policy on the path has bindings.
	governed bool
	// granted: one of them grants the permission.
	granted bool
	// where lists the resources whose policies were consulted.
	where []string
}

// iamAllows checks members against the policies on name's path, for
// permission (a table permission is taken as its authorized-view or backup
// counterpart when name is one: auth.PermissionFor).
func (s *Server) iamAllows(members []string, permission, name string) (iamDecision, string, error) {
	return s.iamAllowsWith(members, permission, name, nil)
}

// iamAllowsWith is iamAllows with name's own policy taken as replaced by
// override (when not nil): what a SetIamPolicy would leave.
func (s *Server) iamAllowsWith(members []string, permission, name string, override *iampb.Policy) (iamDecision, string, error) {
	return s.iamDecide(context.Background(), members, permission, name, override)
}

// iamDecide is iamAllowsWith for a request with ctx (whose deadline bounds
// a cluster node's etcd read).
func (s *Server) iamDecide(ctx context.Context, members []string, permission, name string, override *iampb.Policy) (iamDecision, string, error) {
	inst, path, ok := iamPath(name)
	if !ok {
		return iamDecision{}, permission, nil
	}
	permission = auth.PermissionFor(permission, path[0].kind)
	pols, err := s.iamPoliciesCtx(ctx, inst, path)
	if err != nil {
		return iamDecision{}, permission, err
	}
	if override != nil {
		delete(pols, path[0].rest)
		if len(override.GetBindings()) > 0 {
			pols[path[0].rest] = override
		}
	}
	var d iamDecision
	for _, r := range path {
		p := pols[r.rest]
		if p == nil {
			continue
		}
		d.governed = true
		d.where = append(d.where, strings.TrimSuffix(inst+"/"+r.rest, "/"))
		if auth.Grants(bindingsOf(p), members, permission) {
			d.granted = true
			return d, permission, nil
		}
	}
	return d, permission, nil
}

// checkIAM is the IAM step of authorization, after the token's role and
// instances have allowed the call.
func (s *Server) checkIAM(p auth.Principal, method string, req any) error {
	return s.checkIAMCtx(context.Background(), p, method, req)
}

// checkIAMCtx is checkIAM for a request with ctx (whose deadline bounds a
// cluster node's etcd read).
func (s *Server) checkIAMCtx(ctx context.Context, p auth.Principal, method string, req any) error {
	if p.Token == nil {
		return nil // authentication off, a peer, or an open method
	}
	perm, listed := auth.Permission(method)
	if listed && perm == "" {
		return nil
	}
	for _, name := range resourcesOf(req) {
		d, want, err := s.iamDecide(ctx, p.Token.Members, perm, name, nil)
		if err != nil {
			return toStatus(err)
		}
		if !d.governed || d.granted {
			continue
		}
		if !listed {
			return fmt.Errorf("%w: %s has no IAM permission listed, and %s has an IAM policy", auth.ErrDenied, method, name)
		}
		return fmt.Errorf("%w: %s needs permission %s on %s; the IAM policies of %s grant it to none of %s (token line %d)",
			auth.ErrDenied, method, want, name, strings.Join(d.where, ", "), strings.Join(p.Token.Members, ", "), p.Token.Line)
	}
	return nil
}

// callerHolds filters permissions to those the caller holds on resource:
// all of them with authentication off; else those the token's role reaches
// and, where a policy governs the resource, that it grants.
func (s *Server) callerHolds(ctx context.Context, resource string, permissions []string) ([]string, error) {
	p := principalOf(ctx)
	if p.Token == nil {
		return permissions, nil
	}
	out := []string{}
	for _, perm := range permissions {
		if !auth.TokenHolds(p.Token.Role, perm) {
			continue
		}
		d, _, err := s.iamDecide(ctx, p.Token.Members, perm, resource, nil)
		if err != nil {
			return nil, err
		}
		if !d.governed || d.granted {
			out = append(out, perm)
		}
	}
	return out, nil
}

// keepsSetter refuses a policy after which the caller could no longer set
// the resource's policy: with IAM narrowing every token, that would lock
// out every token not bound elsewhere on the path, with no way back short
// of the data directory.
func (s *Server) keepsSetter(ctx context.Context, method, resource string, p *iampb.Policy) error {
	pr := principalOf(ctx)
	if pr.Token == nil {
		return nil
	}
	perm, _ := auth.Permission(method)
	d, want, err := s.iamDecide(ctx, pr.Token.Members, perm, resource, p)
	if err != nil {
		return toStatus(err)
	}
	if d.governed && !d.granted {
		return status.Errorf(codes.FailedPrecondition, "ebbtable: this policy would take %s on %s away from you (%s): IAM narrows every token, so no one outside the policies could change it back. Bind one of your members to roles/bigtable.admin or roles/owner in it (or on a parent), or set it with a token that stays bound",
			want, resource, strings.Join(pr.Token.Members, ", "))
	}
	return nil
}

// consoleIAM checks a request to the HTTP port (the web console, which
// shows every table) against every IAM policy: the token must hold
// bigtable.tables.readRows (GET) or bigtable.tables.update (anything else)
// on each resource a policy governs.
func (s *Server) consoleIAM(p auth.Principal, need auth.Role) error {
	perm := "bigtable.tables.readRows"
	if need >= auth.Admin {
		perm = "bigtable.tables.update"
	}
	var governed []string
	var err error
	if s.cluster != nil {
		governed, err = s.clusterGoverned() // clusteriam.go
	} else {
		err = s.engine.InstanceMeta(kindIAM, "", func(inst, name string, _ []byte) error {
			governed = append(governed, strings.TrimSuffix(inst+"/"+name, "/"))
			return nil
		})
	}
	if err != nil {
		return err
	}
	for _, res := range governed {
		d, want, err := s.iamAllows(p.Token.Members, perm, res)
		if err != nil {
			return err
		}
		if d.governed && !d.granted {
			return fmt.Errorf("%w: the HTTP port shows every table, and the IAM policies of %s do not grant %s to %s (token line %d)",
				auth.ErrDenied, res, want, strings.Join(p.Token.Members, ", "), p.Token.Line)
		}
	}
	return nil
}
