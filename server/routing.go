package server

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"sort"
	"strings"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// App-profile routing of data RPCs, as Cloud Bigtable does it:
//
//   - single-cluster routing sends every request to the named cluster: served
//     here when it is this process's cluster, forwarded to that peer
//     otherwise; an unreachable peer is Unavailable (no failover);
//   - multi-cluster-routing-use-any serves here when this cluster is in the
//     profile's set (empty = every cluster of the instance), else forwards to
//     the first routable peer of the set in id order and, when that peer
//     answers Unavailable before anything was relayed, to the next;
//   - with row affinity, a single-row request goes to the cluster that a
//     rendezvous hash of the row key picks among the routable clusters of the
//     set (this one included when in the set), failing over in hash order.
//
// A forwarded request carries MetaRoutedBy; a server receiving one serves it
// locally without looking at its app profile (the forwarding server resolved
// and checked it, and the profile need not exist on the peer), so requests
// never loop.

// MetaRoutedBy is the gRPC metadata key marking a request forwarded by
// another cluster of the instance; its value is that cluster's id.
const MetaRoutedBy = "x-ebbtable-routed-by"

// routePlan says where a data request that is not served locally goes.
type routePlan struct {
	profile string
	// single is set for single-cluster routing: no failover.
	single bool
	// targets are the peers to try, in order.
	targets []string
	// fallbackLocal: when every target answered Unavailable, serve locally
	// (row affinity ordered a peer before this cluster).
	fallbackLocal bool
}

// routedBy returns the cluster that forwarded the request, or "".
func routedBy(ctx context.Context) string {
	// By key: FromIncomingContext copies the whole map on every request.
	if v := ebbHeader(ctx, MetaRoutedBy); len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// routable says whether routing may send requests to a peer: it finished
// its initial copy (Ready) and is not known to be down, i.e. its last
// exchange succeeded, it was never contacted yet, or its last failure is
// more than peerHealthyWithin old (then it is tried again).
func (ps *peerSet) routable(id string) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p, ok := ps.m[id]
	if !ok || !p.info.Ready {
		return false
	}
	if p.lastErr == nil {
		return true
	}
	return ps.s.opts.Clock.Now().Sub(p.lastFail) > peerHealthyWithin
}

// route resolves the request's app profile. It returns nil to serve the
// request here, or the plan to forward it. row is the row key of a
// single-row request (nil otherwise), used by row affinity.
func (d *dataServer) route(ctx context.Context, inst, profileID string, transactional bool, row []byte) (*routePlan, error) {
	if by := routedBy(ctx); by != "" {
		if by == d.s.opts.ClusterID && forwardedRev(ctx) >= 0 {
			// A node of this cluster forwarded its share to the tablet's
			// owner: the profile is checked here (clustermeta.go).
			return nil, d.s.inst.checkForwardedProfile(inst, profileID, transactional)
		}
		return nil, nil
	}
	p, err := d.s.inst.checkProfile(inst, profileID, transactional)
	if err != nil {
		return nil, err
	}
	local := d.s.opts.ClusterID
	switch r := p.GetRoutingPolicy().(type) {
	case *adminpb.AppProfile_SingleClusterRouting_:
		id := r.SingleClusterRouting.GetClusterId()
		if id == local {
			return nil, nil
		}
		if _, ok := d.s.peers.get(id); !ok {
			return nil, status.Errorf(codes.Unavailable, "ebbtable: app profile %s routes to cluster %q, which no known peer serves (this process serves %q)", p.GetName(), id, local)
		}
		return &routePlan{profile: p.GetName(), single: true, targets: []string{id}}, nil
	case *adminpb.AppProfile_MultiClusterRoutingUseAny_:
		ids := slices.Clone(r.MultiClusterRoutingUseAny.GetClusterIds())
		if len(ids) == 0 {
			// Every cluster of the instance: this one and the peers (a
			// cluster only recorded by CreateCluster is never routable, so
			// the stored records need not be read on every request).
			ids = append(ids, local)
			for _, p := range d.s.peers.list() {
				ids = append(ids, p.ID)
			}
		}
		sort.Strings(ids)
		ids = slices.Compact(ids)
		localIn := slices.Contains(ids, local)
		var cands []string // routable clusters of the set, this one included
		for _, id := range ids {
			if id == local || d.s.peers.routable(id) {
				cands = append(cands, id)
			}
		}
		plan := &routePlan{profile: p.GetName()}
		if row != nil && r.MultiClusterRoutingUseAny.GetRowAffinity() != nil && len(cands) > 0 {
			for _, id := range affinityOrder(row, cands) {
				if id == local {
					plan.fallbackLocal = true
					break
				}
				plan.targets = append(plan.targets, id)
			}
			if len(plan.targets) == 0 {
				return nil, nil
			}
			return plan, nil
		}
		if localIn {
			return nil, nil
		}
		plan.targets = cands
		if len(plan.targets) == 0 {
			// Every ready peer of the set failed recently: try them anyway
			// rather than refuse without asking.
			for _, id := range ids {
				if pi, ok := d.s.peers.get(id); ok && pi.Ready {
					plan.targets = append(plan.targets, id)
				}
			}
		}
		if len(plan.targets) == 0 {
			return nil, status.Errorf(codes.Unavailable, "ebbtable: app profile %s: no cluster of %v is available (none is this process's cluster %q or a ready peer)", p.GetName(), ids, local)
		}
		return plan, nil
	}
	return nil, nil
}

// affinityOrder orders clusters for a row by rendezvous hashing: each
// cluster scores hash(cluster, row) and the highest score wins. A row keeps
// its cluster as long as that cluster is a candidate; when it is not, only
// its rows move.
func affinityOrder(row []byte, clusters []string) []string {
	fnv64 := func(b []byte) uint64 {
		h := fnv.New64a()
		h.Write(b)
		return h.Sum64()
	}
	rh := fnv64(row)
	// FNV alone mixes trailing bytes poorly into the high bits, so the two
	// hashes are combined through the splitmix64 finalizer.
	score := func(id string) uint64 {
		x := rh ^ (fnv64([]byte(id)) * 0x9e3779b97f4a7c15)
		x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
		x = (x ^ (x >> 27)) * 0x94d049bb133111eb
		return x ^ (x >> 31)
	}
	out := slices.Clone(clusters)
	sort.SliceStable(out, func(i, j int) bool {
		si, sj := score(out[i]), score(out[j])
		if si != sj {
			return si > sj
		}
		return out[i] < out[j]
	})
	return out
}

// outgoing is the context for a forwarded call: the caller's deadline and
// metadata (cell TTL headers and the like), minus transport headers, plus
// the routing marker.
func (d *dataServer) outgoing(ctx context.Context) context.Context {
	in, _ := metadata.FromIncomingContext(ctx)
	md := metadata.MD{}
	for k, v := range in {
		if strings.HasPrefix(k, ":") || strings.HasPrefix(k, "grpc-") || k == "content-type" || k == "user-agent" || k == "te" || k == MetaRoutedBy {
			continue
		}
		md[k] = slices.Clone(v)
	}
	md.Set(MetaRoutedBy, d.s.opts.ClusterID)
	return metadata.NewOutgoingContext(ctx, md)
}

// noteContact records a forwarded call's outcome on the peer: Unavailable
// is a failed exchange, anything else (including application errors) shows
// the peer is up.
func (d *dataServer) noteContact(id string, err error) {
	if status.Code(err) == codes.Unavailable {
		d.s.peers.contact(id, err)
		return
	}
	d.s.peers.contact(id, nil)
}

// client returns a Data API client for a peer.
func (d *dataServer) client(id string) (btpb.BigtableClient, error) {
	c, err := d.s.peers.conn(id)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "ebbtable: peer %s: %v", id, err)
	}
	return btpb.NewBigtableClient(c), nil
}

// giveUp is the error once no target could be reached.
func (p *routePlan) giveUp(failures []string) error {
	if p.single {
		return status.Errorf(codes.Unavailable, "ebbtable: app profile %s routes to cluster %s, which cannot be reached: %s (single-cluster routing does not fail over)", p.profile, p.targets[0], strings.Join(failures, "; "))
	}
	return status.Errorf(codes.Unavailable, "ebbtable: app profile %s: no cluster could be reached: %s", p.profile, strings.Join(failures, "; "))
}

// errServeLocally is returned by forwarding when the plan falls back to
// this cluster.
var errServeLocally = errors.New("serve locally")

// forwardUnary sends a unary call along the plan.
func forwardUnary[Resp any](d *dataServer, ctx context.Context, p *routePlan, call func(context.Context, btpb.BigtableClient) (Resp, error)) (Resp, error) {
	var zero Resp
	var failures []string
	out := d.outgoing(ctx)
	for _, id := range p.targets {
		c, err := d.client(id)
		if err == nil {
			var resp Resp
			resp, err = call(out, c)
			d.noteContact(id, err)
			if err == nil {
				return resp, nil
			}
		}
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return zero, err
		}
		failures = append(failures, fmt.Sprintf("%s: %s", id, status.Convert(err).Message()))
	}
	if p.fallbackLocal {
		return zero, errServeLocally
	}
	return zero, p.giveUp(failures)
}

// recver is the receiving side of a server-streaming client call.
type recver[T any] interface{ Recv() (*T, error) }

// forwardStream sends a server-streaming call along the plan and relays the
// responses. It fails over only while nothing has been relayed.
func forwardStream[T any](d *dataServer, ctx context.Context, p *routePlan, open func(context.Context, btpb.BigtableClient) (recver[T], error), send func(*T) error) error {
	var failures []string
	for _, id := range p.targets {
		sent, err := relay(d, ctx, id, open, send)
		if err == nil {
			return nil
		}
		if sent || status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return err
		}
		failures = append(failures, fmt.Sprintf("%s: %s", id, status.Convert(err).Message()))
	}
	if p.fallbackLocal {
		return errServeLocally
	}
	return p.giveUp(failures)
}

// relay runs one forwarded stream; sent says whether any response reached
// the caller.
func relay[T any](d *dataServer, ctx context.Context, id string, open func(context.Context, btpb.BigtableClient) (recver[T], error), send func(*T) error) (sent bool, err error) {
	c, err := d.client(id)
	if err != nil {
		return false, err
	}
	cctx, cancel := context.WithCancel(d.outgoing(ctx))
	defer cancel()
	// A relayed stream that never ends on its own (a tailing change
	// stream) ends when this server begins to close, as a local one does.
	go func() {
		select {
		case <-d.s.stopping:
			cancel()
		case <-cctx.Done():
		}
	}()
	st, err := open(cctx, c)
	for err == nil {
		var m *T
		if m, err = st.Recv(); err != nil {
			break
		}
		if serr := send(m); serr != nil {
			d.noteContact(id, nil)
			return true, serr
		}
		sent = true
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	select {
	case <-d.s.stopping:
		if err != nil && ctx.Err() == nil {
			return true, status.Error(codes.Unavailable, "ebbtable: server shutting down; retry (change streams: resume from the last token)")
		}
	default:
	}
	d.noteContact(id, err)
	return sent, err
}

// singleRow returns the key of a row set naming exactly one row, or nil.
func singleRow(rs *btpb.RowSet) []byte {
	if len(rs.GetRowKeys()) == 1 && len(rs.GetRowRanges()) == 0 {
		return rs.GetRowKeys()[0]
	}
	return nil
}

// routeUnary resolves the profile of a unary data call and forwards it when
// it is not served here; handled is false when the caller serves it.
func routeUnary[Resp any](d *dataServer, ctx context.Context, inst, profile string, transactional bool, row []byte, call func(context.Context, btpb.BigtableClient) (Resp, error)) (resp Resp, handled bool, err error) {
	p, err := d.route(ctx, inst, profile, transactional, row)
	if err != nil || p == nil {
		return resp, err != nil, err
	}
	resp, err = forwardUnary(d, ctx, p, call)
	if errors.Is(err, errServeLocally) {
		return resp, false, nil
	}
	return resp, true, err
}

// routeStream is routeUnary for server-streaming calls.
func routeStream[T any](d *dataServer, ctx context.Context, inst, profile string, row []byte, open func(context.Context, btpb.BigtableClient) (recver[T], error), send func(*T) error) (handled bool, err error) {
	p, err := d.route(ctx, inst, profile, false, row)
	if err != nil || p == nil {
		return err != nil, err
	}
	err = forwardStream(d, ctx, p, open, send)
	if errors.Is(err, errServeLocally) {
		return false, nil
	}
	return true, err
}
