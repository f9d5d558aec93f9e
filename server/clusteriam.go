package server

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"cloud.google.com/go/iam/apiv1/iampb"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// IAM policies in cluster mode (docs/security.md, "IAM policies";
// docs/scale-out.md, "IAM policies"): every policy (an instance's, a
// table's, an authorized view's, a backup's) is kept in etcd (iam/NAME),
// where every node reads, enforces and changes the same one. Outside a
// cluster they stay in the node's metadata, stamped for replication to
// peer clusters (metarepl.go).

// iamTimeout bounds an etcd read or write of a policy.
const iamTimeout = 10 * time.Second

// iamCheckWait bounds the etcd read of an IAM check made while the cache
// is not current (ClusterOptions.iamCheckTimeout in tests): with etcd
// unreachable, the checked call fails UNAVAILABLE after this, rather than
// holding the caller (and a server goroutine) for iamTimeout. etcd answers
// in milliseconds when reachable; a client whose deadline is shorter gives
// up at its own deadline.
const iamCheckWait = 1500 * time.Millisecond

// iamCacheMetrics tell how often IAM checks miss the watch-fed cache
// (clusteretcd/iam.go): ebbtable_iam_cache_fallbacks_total{result} counts
// checks made while it was not current, which read etcd instead (etcd)
// or found etcd unreachable and failed UNAVAILABLE (unavailable);
// ebbtable_iam_cache_stale is 1 while it is not current (0 when it is,
// and on a node outside a cluster).
type iamCacheMetrics struct {
	fallbacks *prometheus.CounterVec
	stale     prometheus.GaugeFunc
	member    atomic.Pointer[clusteretcd.Member] // set once joined
}

func (c *clusterMember) newIAMCacheMetrics() {
	c.iamCache.fallbacks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ebbtable_iam_cache_fallbacks_total",
		Help: "IAM checks made while the node's IAM cache was not current (cluster mode), by result: etcd (read etcd instead), unavailable (etcd unreachable: refused UNAVAILABLE)."}, []string{"result"})
	for _, r := range []string{"etcd", "unavailable"} {
		c.iamCache.fallbacks.WithLabelValues(r)
	}
	c.iamCache.stale = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ebbtable_iam_cache_stale",
		Help: "1 while the node's IAM cache is not known current (its etcd watch broken, or silent for longer than the freshness bound): IAM checks read etcd. 0 otherwise, and outside a cluster."},
		func() float64 {
			if m := c.iamCache.member.Load(); m != nil && !m.IAMCacheCurrent() {
				return 1
			}
			return 0
		})
}

// iamFallback reads etcd for an IAM check the cache could not answer,
// within iamCheckWait or the request's deadline (ctx's) if sooner, and
// counts it.
func (c *clusterMember) iamFallback(ctx context.Context, read func(context.Context) error) error {
	d := c.opts.iamCheckTimeout
	if d <= 0 {
		d = iamCheckWait
	}
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	// Not the request's own context: nothing of it goes to etcd but the
	// bound.
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := read(ctx); err != nil {
		c.iamCache.fallbacks.WithLabelValues("unavailable").Inc()
		return status.Errorf(codes.Unavailable, "%v", err)
	}
	c.iamCache.fallbacks.WithLabelValues("etcd").Inc()
	return nil
}

// clusterIAM reports whether resource's policy is kept in etcd.
func (s *Server) clusterIAM(resource string) bool {
	return s.cluster != nil
}

// clusterIAMName is resource's name as etcd keys its policy: the name
// iamPolicies builds from its instance and the rest.
func clusterIAMName(resource string) (string, error) {
	inst, rest, err := iamKey(resource)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(inst+"/"+rest, "/"), nil
}

// readIAM returns resource's policy and the revision to compare when it
// is replaced (etcd's in cluster mode; 0 otherwise).
func (s *Server) readIAM(resource string) (*iampb.Policy, int64, error) {
	if !s.clusterIAM(resource) {
		p, err := s.IAMPolicy(resource)
		return p, 0, err
	}
	resource, err := clusterIAMName(resource)
	if err != nil {
		return nil, 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), iamTimeout)
	defer cancel()
	v, rev, err := s.cluster.m.GetIAMPolicy(ctx, resource)
	if err != nil {
		return nil, 0, status.Errorf(codes.Unavailable, "%v", err)
	}
	p := &iampb.Policy{}
	if err := proto.Unmarshal(v, p); err != nil {
		return nil, 0, status.Errorf(codes.DataLoss, "ebbtable: the IAM policy of %s in etcd: %v", resource, err)
	}
	return p, rev, nil
}

// storeIAM stores resource's encoded policy, read at rev (ABORTED if it
// changed since, through another node).
func (s *Server) storeIAM(resource string, v []byte, rev int64) error {
	if !s.clusterIAM(resource) {
		inst, rest, err := iamKey(resource)
		if err != nil {
			return err
		}
		return s.putMeta(kindIAM, inst, rest, v) // stamped: it travels to peer clusters (metarepl.go)
	}
	resource, err := clusterIAMName(resource)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), iamTimeout)
	defer cancel()
	stamp, err := json.Marshal(s.nextMetaStamp()) // it travels to peer clusters (clusteriamrepl.go)
	if err != nil {
		return err
	}
	err = s.cluster.m.PutIAMPolicyStamped(ctx, resource, v, rev, stamp)
	if errors.Is(err, clusteretcd.ErrRecordChanged) {
		return status.Errorf(codes.Aborted, "ebbtable: the policy of %s changed since it was read (through another node); read it again and retry", resource)
	}
	if err != nil {
		return status.Errorf(codes.Unavailable, "%v", err)
	}
	return nil
}

// forgetClusterIAM drops a deleted resource's policy in cluster mode. A
// backup's is dropped by the node that deleted it. Tables and authorized
// views change through the schema log, applied by every node, some of
// them late: a node applying an old delete must not drop a policy set
// since on a resource made again under the name. So their policies go
// with the log entry that creates a table (clusteretcd DirOp.Create) and,
// for a deleted authorized view, by the node that proposed the delete
// (dropClusterIAM, clusterschema.go); here they are left alone.
func (s *Server) forgetClusterIAM(resource string) error {
	if !strings.Contains(resource, "/backups/") {
		return nil
	}
	return s.dropClusterIAM(resource)
}

// forgetInstanceIAM drops a deleted instance's policy from etcd in
// cluster mode, so an instance made again under the name starts without
// it; only if the cluster has no table of the instance (none served, none
// kept for an undelete), whose access it still governs: DeleteInstance is
// a node's own (it deletes the node's declaration).
func (s *Server) forgetInstanceIAM(inst string) error {
	if s.cluster == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), iamTimeout)
	defer cancel()
	gone, err := s.goneIAMStamp()
	if err != nil {
		return err
	}
	dropped, err := s.cluster.m.DeleteInstanceIAM(ctx, inst, gone)
	if err != nil {
		return status.Errorf(codes.Unavailable, "%v", err)
	}
	if !dropped {
		s.log.Warn("the deleted instance's IAM policy is kept in etcd: the cluster still has tables of it", "instance", inst)
	}
	return nil
}

// dropClusterIAM deletes a deleted resource's policy from etcd, leaving a
// stamped tombstone that travels to peer clusters (clusteriamrepl.go), so
// they drop their copy too.
func (s *Server) dropClusterIAM(resource string) error {
	name, err := clusterIAMName(resource)
	if err != nil {
		return err
	}
	gone, err := s.goneIAMStamp()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), iamTimeout)
	defer cancel()
	if err := s.cluster.m.DropIAMPolicyStamped(ctx, name, gone); err != nil {
		return status.Errorf(codes.Unavailable, "%v", err)
	}
	return nil
}

// goneIAMStamp is the stamp of a policy deleted here now (metarepl.go).
func (s *Server) goneIAMStamp() ([]byte, error) {
	m := s.nextMetaStamp()
	m.Gone = true
	return json.Marshal(m)
}

// clusterIAMPolicies reads the policies of inst's resources rest from
// the member's watch-fed cache (clusteretcd/iam.go) while it is known
// current, else from etcd (one request); those with no bindings are left
// out.
func (s *Server) clusterIAMPolicies(ctx context.Context, inst string, rest []string) (map[string]*iampb.Policy, error) {
	names := make([]string, len(rest))
	for i, r := range rest {
		names[i] = strings.TrimSuffix(inst+"/"+r, "/")
	}
	got, ok := s.cluster.m.CachedIAMPolicies(names) // the watch-fed cache, while it is current
	if !ok {
		if err := s.cluster.iamFallback(ctx, func(ctx context.Context) (err error) {
			got, err = s.cluster.m.GetIAMPolicies(ctx, names)
			return err
		}); err != nil {
			return nil, err
		}
	}
	out := map[string]*iampb.Policy{}
	for i, n := range names {
		v, ok := got[n]
		if !ok {
			continue
		}
		p := &iampb.Policy{}
		if err := proto.Unmarshal(v, p); err != nil {
			return nil, status.Errorf(codes.DataLoss, "ebbtable: the IAM policy of %s in etcd: %v", n, err)
		}
		if len(p.GetBindings()) > 0 {
			out[rest[i]] = p
		}
	}
	return out, nil
}

// clusterGoverned lists the resources with a stored policy in cluster mode.
func (s *Server) clusterGoverned() ([]string, error) {
	all, ok := s.cluster.m.CachedIAMList()
	if !ok {
		if err := s.cluster.iamFallback(context.Background(), func(ctx context.Context) (err error) {
			all, err = s.cluster.m.ListIAMPolicies(ctx)
			return err
		}); err != nil {
			return nil, err
		}
	}
	out := make([]string, 0, len(all))
	for n := range all {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// checkClusterBackup answers NotFound for a cluster backup with no record.
func (s *Server) checkClusterBackup(resource string) error {
	n, err := parseBackup(resource)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), iamTimeout)
	defer cancel()
	_, _, _, err = s.cluster.readBackup(ctx, n)
	return err
}
