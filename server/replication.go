package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// Replication between clusters (docs/replication.md). Each cluster pulls
// from each peer the user records that originated there (EbbAdmin/Pull, a
// long poll over every table's change stream) and applies them with
// table.Engine.ApplyReplicated; the checkpoint of what it applied is written
// in the same batch. A cluster joins with EbbAdmin/Join, copies the seed's
// data (EbbAdmin/Snapshot) before it serves, then says EbbAdmin/Ready.
// Schemas (tables, families, GC rules) travel with each pull and the newer
// schema stamp wins.

// Method names of the replication RPCs (EbbAdminService).
const (
	MethodJoin     = "/" + EbbAdminService + "/Join"
	MethodReady    = "/" + EbbAdminService + "/Ready"
	MethodPull     = "/" + EbbAdminService + "/Pull"
	MethodSnapshot = "/" + EbbAdminService + "/Snapshot"
	MethodStatus   = "/" + EbbAdminService + "/ReplicationStatus"
	MethodLink     = "/" + EbbAdminService + "/ReplicationLink"
)

// Replication tuning.
const (
	pullWait       = 250 * time.Millisecond // how long a pull waits for news (also how stale an idle peer's checkpoint gets)
	pullLimit      = 2000                   // records per table per pull
	pullReadStep   = 200                    // records read at a time while filling a pull
	pullMaxBytes   = 32 << 20               // about the most record bytes one pull carries
	pullTimeout    = 15 * time.Second       // one pull call, waiting included
	pullBackoffMax = 2 * time.Second
	// tombstoneTrimEvery is how often tombstones no peer needs are dropped.
	tombstoneTrimEvery = 30 * time.Second
)

// replication is the server's replication state: the pullers and what
// they applied.
type replication struct {
	s  *Server
	mu sync.Mutex
	// through is, per source cluster, the source's closed timestamp up to
	// which every table's records are applied here.
	through map[string]int64
	paused  map[string]bool
	running map[string]bool
	wg      sync.WaitGroup
	// lastTrim is when tombstones were last trimmed.
	lastTrim time.Time
	// peerCutoffs are the age cutoffs each peer reported with its last
	// answer, per table family.
	peerCutoffs map[string]map[familyKey]int64

	latency *prometheus.HistogramVec
	applied *prometheus.CounterVec
	// gcShipped and gcApplied count versions-GC deletions (cells) shipped
	// to peers and applied from them (docs/replication.md, "GC across clusters").
	gcShipped *prometheus.CounterVec
	gcApplied *prometheus.CounterVec
}

func newReplication(s *Server) *replication {
	r := &replication{s: s, through: map[string]int64{}, paused: map[string]bool{}, running: map[string]bool{}, peerCutoffs: map[string]map[familyKey]int64{},
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ebbtable_replication_latency_seconds",
			Help:    "Time from a write's commit on its origin cluster to its apply here, by source cluster.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"source"}),
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ebbtable_replication_applied_records_total",
			Help: "Records pulled from a peer and applied here, by source cluster.",
		}, []string{"source"}),
		gcShipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ebbtable_replication_gc_deletes_shipped_total",
			Help: "Cells deleted by this cluster's versions garbage collection (as GC leader) shipped to a peer, by table; counted each time a pull carries them.",
		}, []string{"table"}),
		gcApplied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ebbtable_replication_gc_deletes_applied_total",
			Help: "Cell deletions of the GC leader's versions garbage collection applied here, by source cluster and table.",
		}, []string{"source", "table"}),
	}
	s.opts.Registry.MustRegister(r.latency, r.applied, r.gcShipped, r.gcApplied, r)
	return r
}

// familyKey names a column family of a table of an instance.
type familyKey struct{ instance, table, family string }

var divergenceDesc = prometheus.NewDesc("ebbtable_replication_gc_divergence_seconds",
	"Spread of the clusters' age cutoffs for a column family: how far apart in cell time the clusters' age collection stands (cells in that span may exist on some clusters and not others). 0 when they agree.",
	[]string{"table", "family"}, nil)

// divergence returns, per table family with an age cutoff on at least two
// clusters, the spread max − min of the cutoffs.
func (r *replication) divergence() map[familyKey]time.Duration {
	all := map[familyKey][]int64{}
	for _, m := range r.s.engine.Tables("") {
		for fam, c := range r.s.ageCutoffs(m) {
			k := familyKey{m.Instance, m.Name, fam}
			all[k] = append(all[k], c)
		}
	}
	r.mu.Lock()
	for _, cuts := range r.peerCutoffs {
		for k, c := range cuts {
			all[k] = append(all[k], c)
		}
	}
	r.mu.Unlock()
	out := map[familyKey]time.Duration{}
	for k, cs := range all {
		if len(cs) < 2 {
			continue
		}
		lo, hi := cs[0], cs[0]
		for _, c := range cs[1:] {
			lo, hi = min(lo, c), max(hi, c)
		}
		out[k] = time.Duration(hi-lo) * time.Microsecond
	}
	return out
}

var maxDelayDesc = prometheus.NewDesc("ebbtable_replication_max_delay_seconds",
	"How far this cluster lags a source cluster: now minus the source's commit time through which every record is applied here.",
	[]string{"source"}, nil)

// Describe and Collect export the max delay per source, computed when
// scraped so that a stalled link shows a growing delay.
func (r *replication) Describe(ch chan<- *prometheus.Desc) {
	ch <- maxDelayDesc
	ch <- divergenceDesc
}

func (r *replication) Collect(ch chan<- prometheus.Metric) {
	peers := r.s.peers.list()
	for _, p := range peers {
		if d, ok := r.maxDelay(p.ID); ok {
			ch <- prometheus.MustNewConstMetric(maxDelayDesc, prometheus.GaugeValue, d.Seconds(), p.ID)
		}
	}
	if len(peers) == 0 {
		return
	}
	// Labelled by table and family; the same names in two instances show
	// the larger spread.
	byName := map[[2]string]time.Duration{}
	for k, d := range r.divergence() {
		n := [2]string{k.table, k.family}
		byName[n] = max(byName[n], d)
	}
	for n, d := range byName {
		ch <- prometheus.MustNewConstMetric(divergenceDesc, prometheus.GaugeValue, d.Seconds(), n[0], n[1])
	}
}

// maxDelay is the current delay behind a source (for status and tests).
func (r *replication) maxDelay(id string) (time.Duration, bool) {
	r.mu.Lock()
	t, ok := r.through[id]
	r.mu.Unlock()
	if !ok {
		return 0, false
	}
	return time.Duration(max(clock.Micros(r.s.opts.Clock.Now())-t, 0)) * time.Microsecond, true
}

// start runs a puller for a peer unless one runs.
func (r *replication) start(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running[id] {
		return
	}
	select {
	case <-r.s.stopping:
		return
	default:
	}
	r.running[id] = true
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.run(id)
	}()
}

func (r *replication) setPaused(id string, on bool) {
	r.mu.Lock()
	r.paused[id] = on
	r.mu.Unlock()
}

func (r *replication) isPaused(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.paused[id]
}

// run pulls from one peer until the server stops.
func (r *replication) run(id string) {
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-r.s.stopping:
			return
		default:
		}
		if r.isPaused(id) {
			r.sleep(100 * time.Millisecond)
			continue
		}
		if _, ok := r.s.peers.get(id); !ok {
			r.mu.Lock()
			delete(r.running, id)
			r.mu.Unlock()
			return
		}
		err := r.pullOnce(id)
		r.s.peers.contact(id, err)
		if err != nil {
			select {
			case <-r.s.stopping:
				return
			default:
			}
			r.s.log.Debug("replication: pull failed", "peer", id, "err", err)
			r.sleep(backoff)
			backoff = min(2*backoff, pullBackoffMax)
			continue
		}
		backoff = 100 * time.Millisecond
	}
}

// sleep waits on the real clock (replication talks to other processes in
// real time) unless the server stops.
func (r *replication) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.s.stopping:
	}
}

// stopCtx is a context cancelled when the server stops.
func (s *Server) stopCtx(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	go func() {
		select {
		case <-s.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// call invokes a unary EbbAdmin method on a peer.
func (s *Server) callPeer(ctx context.Context, id, method string, in map[string]any) (*structpb.Struct, error) {
	conn, err := s.peers.conn(id)
	if err != nil {
		return nil, err
	}
	return invokeStruct(ctx, conn, method, in)
}

func invokeStruct(ctx context.Context, conn *grpc.ClientConn, method string, in map[string]any) (*structpb.Struct, error) {
	req, err := structpb.NewStruct(in)
	if err != nil {
		return nil, err
	}
	out := new(structpb.Struct)
	if err := conn.Invoke(ctx, method, req, out); err != nil {
		return nil, err
	}
	return out, nil
}

// lowerAfter is where reading a table's records resumes after p. A position
// with the largest index stands for "everything committed at p.Commit".
func lowerAfter(tableID uint64, p changestream.Position) []byte {
	if p.Index == math.MaxUint32 {
		return changestream.TimeKey(tableID, p.Commit+1)
	}
	return changestream.After(tableID, p)
}

func throughClosed(closed int64) changestream.Position {
	return changestream.Position{Commit: closed, Index: math.MaxUint32}
}

func tableKey(instance, name string) string { return instance + "\x00" + name }

// ---- the puller ----

// pullOnce asks a peer for news and applies it.
func (r *replication) pullOnce(id string) error {
	s := r.s
	positions := map[string]any{}
	for _, m := range s.engine.Tables("") {
		p, ok, err := s.engine.Checkpoint(m, id)
		if err != nil {
			return err
		}
		if ok {
			positions[tableKey(m.Instance, m.Name)] = p.Token()
		}
	}
	ctx, cancel := s.stopCtx(pullTimeout)
	defer cancel()
	out, err := s.callPeer(ctx, id, MethodPull, map[string]any{
		"cluster": s.opts.ClusterID, "addr": s.advertised(), "wait_ms": float64(pullWait.Milliseconds()), "limit": float64(pullLimit), "positions": positions,
	})
	if err != nil {
		return err
	}
	if r.isPaused(id) {
		return nil // paused while the pull waited: drop what it brought
	}
	f := out.GetFields()
	if got := f["cluster"].GetStringValue(); got != id {
		return fmt.Errorf("ebbtable: peer at %s is cluster %q, not %q", s.peerAddr(id), got, id)
	}
	r.learnPeers(f["peers"].GetListValue())
	if err := r.syncSchemas(id, f["catalog"].GetListValue(), f["dropped"].GetListValue()); err != nil {
		return err
	}
	if err := r.s.inst.adoptPeerMeta(f["instance_meta"].GetListValue()); err != nil {
		return err
	}
	cuts := map[familyKey]int64{}
	for _, v := range f["age_cutoffs"].GetListValue().GetValues() {
		cf := v.GetStructValue().GetFields()
		c, err := strconv.ParseInt(cf["cutoff"].GetStringValue(), 10, 64)
		if err != nil {
			return err
		}
		cuts[familyKey{cf["instance"].GetStringValue(), cf["table"].GetStringValue(), cf["family"].GetStringValue()}] = c
	}
	r.mu.Lock()
	r.peerCutoffs[id] = cuts
	r.mu.Unlock()
	closed, _ := strconv.ParseInt(f["closed"].GetStringValue(), 10, 64)
	complete := true
	for _, tv := range f["tables"].GetListValue().GetValues() {
		tf := tv.GetStructValue().GetFields()
		m, err := s.engine.Table(tf["instance"].GetStringValue(), tf["table"].GetStringValue())
		if err != nil {
			complete = false
			continue // dropped here meanwhile; the schema sync settles it
		}
		through, err := changestream.ParseToken(tf["through"].GetStringValue())
		if err != nil {
			return err
		}
		if tf["full"].GetBoolValue() {
			complete = false
		}
		var recs []changestream.Record
		toks := tf["positions"].GetListValue().GetValues()
		for i, rv := range tf["records"].GetListValue().GetValues() {
			b, err := base64.StdEncoding.DecodeString(rv.GetStringValue())
			if err != nil {
				return err
			}
			rec, err := changestream.Decode(b)
			if err != nil {
				return err
			}
			if i < len(toks) {
				if rec.Position, err = changestream.ParseToken(toks[i].GetStringValue()); err != nil {
					return err
				}
			}
			recs = append(recs, rec)
		}
		if _, err := s.engine.ApplyReplicated(m, id, recs, through); err != nil {
			return err
		}
		now := clock.Micros(s.opts.Clock.Now())
		for _, rec := range recs {
			r.latency.WithLabelValues(id).Observe(float64(max(now-rec.Commit, 0)) / 1e6)
		}
		r.applied.WithLabelValues(id).Add(float64(len(recs)))
		if n := gcDeletes(recs); n > 0 {
			r.gcApplied.WithLabelValues(id, m.Name).Add(float64(n))
		}
	}
	if complete && closed > 0 {
		r.mu.Lock()
		r.through[id] = max(r.through[id], closed)
		trim := r.s.opts.Clock.Now().Sub(r.lastTrim) > tombstoneTrimEvery
		if trim {
			r.lastTrim = r.s.opts.Clock.Now()
		}
		r.mu.Unlock()
		if trim {
			r.trimTombstones()
		}
	}
	return nil
}

// learnPeers adds clusters a peer knows and this one does not (a third
// cluster that joined through the peer) and updates readiness.
func (r *replication) learnPeers(list *structpb.ListValue) {
	for _, v := range list.GetValues() {
		f := v.GetStructValue().GetFields()
		pi := peerInfo{ID: f["id"].GetStringValue(), Addr: f["addr"].GetStringValue(), Ready: f["ready"].GetBoolValue()}
		if pi.ID == "" || pi.ID == r.s.opts.ClusterID || pi.Addr == "" {
			continue
		}
		if _, known := r.s.peers.get(pi.ID); !known && r.s.peers.gone(pi.ID) {
			continue // removed here with DeleteCluster
		}
		old, ok := r.s.peers.get(pi.ID)
		if ok && old.Addr == pi.Addr && (old.Ready || !pi.Ready) {
			continue
		}
		if ok {
			pi.Ready = pi.Ready || old.Ready
		}
		if err := r.s.peers.add(pi); err != nil {
			r.s.log.Warn("replication: cannot record peer", "peer", pi.ID, "err", err)
		}
	}
}

// familySchema is the replicated part of a family.
type familySchema struct {
	Name      string           `json:"name"`
	GC        gcrule.Rule      `json:"gc"`
	ValueType []byte           `json:"value_type,omitempty"`
	Aggregate table.Aggregator `json:"aggregate,omitempty"`
}

// tableSchema is the replicated part of a table's schema.
type tableSchema struct {
	Instance string         `json:"instance"`
	Name     string         `json:"name"`
	Families []familySchema `json:"families"`
	Stamp    storage.Stamp  `json:"stamp"`
}

func schemaOf(m *table.Meta) tableSchema {
	ts := tableSchema{Instance: m.Instance, Name: m.Name, Stamp: m.Stamp}
	for _, f := range m.Families {
		ts.Families = append(ts.Families, familySchema{Name: f.Name, GC: f.GC, ValueType: f.ValueType, Aggregate: f.Aggregate})
	}
	return ts
}

// syncSchemas makes local schemas follow a peer's newer ones: tables it
// created, families it added, changed or dropped, tables it deleted.
func (r *replication) syncSchemas(peer string, catalog, dropped *structpb.ListValue) error {
	s := r.s
	for _, v := range dropped.GetValues() {
		var d table.DroppedTable
		if err := json.Unmarshal([]byte(v.GetStringValue()), &d); err != nil {
			return err
		}
		m, err := s.engine.Table(d.Instance, d.Name)
		if err != nil || !m.Stamp.Less(d.Stamp) {
			continue
		}
		if err := s.engine.DeleteTableAt(d.Instance, d.Name, d.Stamp); err != nil {
			s.log.Warn("replication: cannot drop table a peer dropped", "peer", peer, "table", d.Name, "err", err)
		}
	}
	drops, err := s.engine.DroppedTables()
	if err != nil {
		return err
	}
	for _, v := range catalog.GetValues() {
		var ts tableSchema
		if err := json.Unmarshal([]byte(v.GetStringValue()), &ts); err != nil {
			return err
		}
		m, err := s.engine.Table(ts.Instance, ts.Name)
		if errors.Is(err, table.ErrTableNotFound) {
			if droppedAfter(drops, ts) {
				continue
			}
			spec := table.TableSpec{Stamp: ts.Stamp}
			for _, f := range ts.Families {
				spec.Families = append(spec.Families, table.FamilySpec{Name: f.Name, GC: f.GC, ValueType: f.ValueType, Aggregate: f.Aggregate})
			}
			if _, err := s.engine.CreateTable(ts.Instance, ts.Name, spec); err != nil && !errors.Is(err, table.ErrTableExists) {
				s.log.Warn("replication: cannot create table a peer created", "peer", peer, "table", ts.Name, "err", err)
			}
			continue
		}
		if err != nil {
			return err
		}
		if !m.Stamp.Less(ts.Stamp) {
			continue
		}
		if err := r.adoptFamilies(m, ts); err != nil {
			s.log.Warn("replication: cannot adopt a peer's schema", "peer", peer, "table", ts.Name, "err", err)
		}
	}
	return nil
}

func droppedAfter(drops []table.DroppedTable, ts tableSchema) bool {
	for _, d := range drops {
		if d.Instance == ts.Instance && d.Name == ts.Name && !d.Stamp.Less(ts.Stamp) {
			return true
		}
	}
	return false
}

// adoptFamilies changes a table's families to a peer's newer schema.
func (r *replication) adoptFamilies(m *table.Meta, ts tableSchema) error {
	var mods []table.FamilyMod
	want := map[string]bool{}
	for _, f := range ts.Families {
		want[f.Name] = true
		cur, ok := m.Family(f.Name)
		switch {
		case !ok:
			mods = append(mods, table.FamilyMod{Name: f.Name, Create: true, GC: f.GC, ValueType: f.ValueType, Aggregate: f.Aggregate})
		case cur.GC.String() != f.GC.String():
			mods = append(mods, table.FamilyMod{Name: f.Name, Update: true, GC: f.GC})
		}
	}
	for _, f := range m.Families {
		if !want[f.Name] {
			mods = append(mods, table.FamilyMod{Name: f.Name, Drop: true})
		}
	}
	if len(mods) == 0 {
		// Same families: take the stamp so the comparison settles.
		mods = []table.FamilyMod{{Name: m.Families[0].Name, Update: true, KeepGC: true}}
		if len(m.Families) == 0 {
			return nil
		}
	}
	_, err := r.s.engine.ModifyFamiliesAt(m.Instance, m.Name, mods, ts.Stamp)
	return err
}

// clusterStates is GetTable's replication view: this cluster is READY; a
// peer still copying the data is INITIALIZING, one that has not answered
// lately UNPLANNED_MAINTENANCE, the others READY.
func (s *Server) clusterStates() map[string]*adminpb.Table_ClusterState {
	out := map[string]*adminpb.Table_ClusterState{s.opts.ClusterID: {ReplicationState: adminpb.Table_ClusterState_READY}}
	for _, p := range s.peers.list() {
		st := adminpb.Table_ClusterState_READY
		switch {
		case !p.Ready:
			st = adminpb.Table_ClusterState_INITIALIZING
		case !s.peers.healthy(p.ID):
			st = adminpb.Table_ClusterState_UNPLANNED_MAINTENANCE
		}
		out[p.ID] = &adminpb.Table_ClusterState{ReplicationState: st}
	}
	return out
}

// trimTombstones drops delete tombstones no peer can still need: stamped
// before every peer's records are applied here.
func (r *replication) trimTombstones() {
	low := int64(math.MaxInt64)
	peers := r.s.peers.list()
	r.mu.Lock()
	for _, p := range peers {
		low = min(low, r.through[p.ID])
	}
	r.mu.Unlock()
	if len(peers) == 0 || low <= 0 {
		return
	}
	if n, err := r.s.engine.TrimTombstones(low); err != nil {
		r.s.log.Warn("replication: trimming tombstones", "err", err)
	} else if n > 0 {
		r.s.log.Debug("replication: trimmed tombstones", "count", n)
	}
}

// ---- the RPCs a peer calls ----

// pull answers a peer's long poll: {cluster, addr, wait_ms, limit,
// positions: {"instance\x00table": token}} → {cluster, closed, peers,
// catalog, dropped, tables: [{instance, table, records, positions, through,
// full}]}. Records are this cluster's own user writes and versions garbage
// collections (see shipsToPeers), base64 of the binary record encoding, each
// with its position token.
func (a *ebbAdmin) pull(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	s := a.s
	caller := str(in, "cluster")
	if caller == "" || caller == s.opts.ClusterID {
		return nil, status.Errorf(codes.InvalidArgument, "ebbtable: pull needs the calling cluster's id (got %q)", caller)
	}
	p, ok := s.peers.get(caller)
	if !ok {
		// A cluster pulls only after joining; one this process forgot
		// (deleted) must join again.
		return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: cluster %q has not joined cluster %q", caller, s.opts.ClusterID)
	}
	if addr := str(in, "addr"); addr != "" && addr != p.Addr {
		// The peer restarted on another address.
		p.Addr = addr
		if err := s.peers.add(p); err != nil {
			return nil, toStatus(err)
		}
	}
	limit := int(in.GetFields()["limit"].GetNumberValue())
	if limit <= 0 {
		limit = pullLimit
	}
	wait := time.Duration(in.GetFields()["wait_ms"].GetNumberValue()) * time.Millisecond
	positions := in.GetFields()["positions"].GetStructValue().GetFields()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		notify := s.engine.ChangesNotify()
		resp, shipped, err := a.collectPull(positions, limit)
		if err != nil || shipped > 0 || wait <= 0 {
			return resp, err
		}
		select {
		case <-notify:
			wait = 0 // answer after one more look
		case <-deadline.C:
			wait = 0
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.stopping:
			return resp, nil
		}
	}
}

func (a *ebbAdmin) collectPull(positions map[string]*structpb.Value, limit int) (*structpb.Struct, int, error) {
	s := a.s
	closed := s.engine.ClosedTimestamp()
	var tables, catalog, dropped, peers []any
	shipped, budget := 0, pullMaxBytes
	for _, m := range s.engine.Tables("") {
		js, err := json.Marshal(schemaOf(m))
		if err != nil {
			return nil, 0, err
		}
		catalog = append(catalog, string(js))
		lower := changestream.TableStart(m.ID)
		if v, ok := positions[tableKey(m.Instance, m.Name)]; ok {
			p, err := changestream.ParseToken(v.GetStringValue())
			if err != nil {
				return nil, 0, status.Errorf(codes.InvalidArgument, "ebbtable: position of %s: %v", m.Name, err)
			}
			lower = lowerAfter(m.ID, p)
		}
		// Read in small steps, so a pull never holds more than about
		// pullMaxBytes of records (values may be up to 100 MiB each).
		var recs, toks []any
		gcCells, n := 0, 0
		// With the pull's byte budget spent, a table is answered with no
		// records and its position unchanged (full: ask again at once).
		full := budget <= 0
		var last changestream.Position
		if v, ok := positions[tableKey(m.Instance, m.Name)]; ok && full {
			last, _ = changestream.ParseToken(v.GetStringValue())
		}
		for !full {
			step := min(pullReadStep, limit-n)
			batch, err := s.engine.ReadChangesUntil(m, lower, closed, step)
			if err != nil {
				return nil, 0, toStatus(err)
			}
			for _, rec := range batch.Records {
				n++
				last = rec.Position
				if shipsToPeers(rec) {
					if rec.Type == changestream.GarbageCollection {
						gcCells += len(rec.Mods)
					}
					enc := base64.StdEncoding.EncodeToString(rec.Encode())
					budget -= len(enc)
					recs = append(recs, enc)
					toks = append(toks, rec.Position.Token())
				}
				if budget <= 0 || n >= limit {
					full = true
					break
				}
			}
			if !batch.Full {
				break
			}
			lower = changestream.After(m.ID, last)
		}
		if gcCells > 0 {
			s.repl.gcShipped.WithLabelValues(m.Name).Add(float64(gcCells))
		}
		through := throughClosed(closed)
		if full {
			through = last
		}
		shipped += len(recs)
		tables = append(tables, map[string]any{
			"instance": m.Instance, "table": m.Name, "records": recs, "positions": toks,
			"through": through.Token(), "full": full,
		})
	}
	drops, err := s.engine.DroppedTables()
	if err != nil {
		return nil, 0, toStatus(err)
	}
	for _, d := range drops {
		js, err := json.Marshal(d)
		if err != nil {
			return nil, 0, err
		}
		dropped = append(dropped, string(js))
	}
	peers = append(peers, map[string]any{"id": s.opts.ClusterID, "addr": s.advertised(), "ready": true})
	for _, p := range s.peers.list() {
		peers = append(peers, map[string]any{"id": p.ID, "addr": p.Addr, "ready": p.Ready})
	}
	var cutoffs []any
	for _, m := range s.engine.Tables("") {
		for fam, c := range s.ageCutoffs(m) {
			cutoffs = append(cutoffs, map[string]any{"instance": m.Instance, "table": m.Name, "family": fam, "cutoff": strconv.FormatInt(c, 10)})
		}
	}
	var meta []any
	for _, kind := range []string{kindCluster, kindAppProfile, kindAppProfileGone} {
		if err := s.engine.InstanceMeta(kind, "", func(inst, name string, v []byte) error {
			meta = append(meta, map[string]any{"kind": kind, "instance": inst, "name": name, "value": string(v)})
			return nil
		}); err != nil {
			return nil, 0, toStatus(err)
		}
	}
	out, err := structpb.NewStruct(map[string]any{
		"cluster": s.opts.ClusterID, "closed": strconv.FormatInt(closed, 10),
		"tables": tables, "catalog": catalog, "dropped": dropped, "peers": peers, "instance_meta": meta,
		"age_cutoffs": cutoffs,
	})
	return out, shipped, err
}

// join registers a cluster joining through this one: {cluster, addr} →
// {cluster, addr, peers}. The joining cluster then copies this one's data
// (Snapshot) and says Ready.
func (a *ebbAdmin) join(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	s := a.s
	id, addr := str(in, "cluster"), str(in, "addr")
	if id == "" || addr == "" {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: join needs the joining cluster's id and address")
	}
	if err := s.sec.allowPeer(addr); err != nil {
		return nil, err
	}
	if id == s.opts.ClusterID {
		return nil, status.Errorf(codes.AlreadyExists, "ebbtable: cluster id %q is this cluster's own; give the joining process another --cluster-id", id)
	}
	if err := s.engine.SetReplicating(s.opts.ClusterID); err != nil {
		return nil, toStatus(err)
	}
	ready := false
	if old, ok := s.peers.get(id); ok && old.Addr == addr {
		ready = old.Ready
	}
	if err := s.engine.DeleteInstanceMeta(kindPeerGone, peerInstance, id); err != nil {
		return nil, toStatus(err)
	}
	if err := s.peers.add(peerInfo{ID: id, Addr: addr, Ready: ready}); err != nil {
		return nil, toStatus(err)
	}
	s.repl.start(id)
	var peers []any
	for _, p := range s.peers.list() {
		if p.ID != id {
			peers = append(peers, map[string]any{"id": p.ID, "addr": p.Addr, "ready": p.Ready})
		}
	}
	return structpb.NewStruct(map[string]any{"cluster": s.opts.ClusterID, "addr": s.advertised(), "peers": peers})
}

// ready marks a joined cluster as having copied the data: {cluster} → {}.
func (a *ebbAdmin) ready(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	s := a.s
	p, ok := s.peers.get(str(in, "cluster"))
	if !ok {
		return nil, status.Errorf(codes.NotFound, "ebbtable: cluster %q has not joined", str(in, "cluster"))
	}
	p.Ready = true
	if err := s.peers.add(p); err != nil {
		return nil, toStatus(err)
	}
	s.inst.peerReady(p.ID)
	return &structpb.Struct{}, nil
}

// snapshot streams a consistent copy of every table to a joining cluster:
// messages {kind: table, schema} | {kind: cells|tombstones, instance, table,
// pairs: [base64 key, base64 value, …]} | {kind: checkpoint, instance,
// table, origin, token}, then {kind: end, closed}.
func (a *ebbAdmin) snapshot(in *structpb.Struct, stream grpc.ServerStream) error {
	s := a.s
	send := func(m map[string]any) error {
		msg, err := structpb.NewStruct(m)
		if err != nil {
			return err
		}
		return stream.SendMsg(msg)
	}
	closed, err := s.engine.Export(func(it table.ExportItem) error {
		m := it.Meta
		switch it.Kind {
		case table.ExportTable:
			js, err := json.Marshal(m)
			if err != nil {
				return err
			}
			return send(map[string]any{"kind": "table", "schema": string(js)})
		case table.ExportCells, table.ExportTombstones:
			kind := "cells"
			if it.Kind == table.ExportTombstones {
				kind = "tombstones"
			}
			pairs := make([]any, 0, 2*len(it.Pairs))
			for _, p := range it.Pairs {
				pairs = append(pairs, base64.StdEncoding.EncodeToString(p[0]), base64.StdEncoding.EncodeToString(p[1]))
			}
			return send(map[string]any{"kind": kind, "instance": m.Instance, "table": m.Name, "pairs": pairs})
		case table.ExportCheckpoint:
			return send(map[string]any{"kind": "checkpoint", "instance": m.Instance, "table": m.Name, "origin": it.Origin, "token": it.Position.Token()})
		}
		return nil
	})
	if err != nil {
		return toStatus(err)
	}
	return send(map[string]any{"kind": "end", "closed": strconv.FormatInt(closed, 10)})
}

// replicationStatus: {instance?, table?} → {cluster, closed, applied: {origin:
// commit time through which that origin's records of the table (of every
// table, without one) are applied here}, peers: [{id, addr, ready, healthy,
// max_delay_seconds}]}.
func (a *ebbAdmin) replicationStatus(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	s := a.s
	var metas []*table.Meta
	if t := str(in, "table"); t != "" {
		inst, err := instanceOf(in)
		if err != nil {
			return nil, err
		}
		m, err := s.engine.Table(inst, t)
		if err != nil {
			return nil, toStatus(err)
		}
		metas = []*table.Meta{m}
	} else {
		metas = s.engine.Tables("")
	}
	applied := map[string]any{}
	var peers []any
	for _, p := range s.peers.list() {
		low := int64(math.MaxInt64)
		for _, m := range metas {
			pos, ok, err := s.engine.Checkpoint(m, p.ID)
			if err != nil {
				return nil, toStatus(err)
			}
			if !ok {
				pos.Commit = 0
			}
			low = min(low, pos.Commit)
		}
		if len(metas) == 0 {
			r := s.repl
			r.mu.Lock()
			low = r.through[p.ID]
			r.mu.Unlock()
		}
		applied[p.ID] = strconv.FormatInt(low, 10)
		entry := map[string]any{"id": p.ID, "addr": p.Addr, "ready": p.Ready, "healthy": s.peers.healthy(p.ID), "paused": s.repl.isPaused(p.ID)}
		if d, ok := s.repl.maxDelay(p.ID); ok {
			entry["max_delay_seconds"] = d.Seconds()
		}
		peers = append(peers, entry)
	}
	return structpb.NewStruct(map[string]any{
		"cluster": s.opts.ClusterID, "closed": strconv.FormatInt(s.engine.ClosedTimestamp(), 10),
		"applied": applied, "peers": peers,
	})
}

// replicationLink pauses or resumes pulling from a peer (an operator's and
// the tests' control): {peer, paused (bool)} → {peer, paused}.
func (a *ebbAdmin) replicationLink(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	id := str(in, "peer")
	if _, ok := a.s.peers.get(id); !ok {
		return nil, status.Errorf(codes.NotFound, "ebbtable: cluster %q is not a peer of %q", id, a.s.opts.ClusterID)
	}
	on := in.GetFields()["paused"].GetBoolValue()
	a.s.repl.setPaused(id, on)
	return structpb.NewStruct(map[string]any{"peer": id, "paused": on})
}

// ---- joining ----

// advertised is the address peers reach this process at.
func (s *Server) advertised() string {
	if s.opts.AdvertiseAddr != "" {
		return s.opts.AdvertiseAddr
	}
	return s.Addr()
}

func (s *Server) peerAddr(id string) string {
	p, _ := s.peers.get(id)
	return p.Addr
}

// joinCluster makes this process a cluster of the instance the process at
// seed serves: unless it joined before, it drops whatever tables it has,
// registers with the seed, copies the seed's data and says it is ready.
func (s *Server) joinCluster(seed string) error {
	if joined, err := s.joinedThrough(); err != nil || joined {
		return err
	}
	// A copy interrupted by a crash left a "joining" mark: throw it away
	// and copy again. Tables without that mark are a user's data, which
	// joining would replace: refuse.
	joining := false
	if err := s.engine.InstanceMeta(kindJoining, peerInstance, func(_, _ string, _ []byte) error {
		joining = true
		return nil
	}); err != nil {
		return err
	}
	if tables := s.engine.Tables(""); len(tables) > 0 && !joining {
		return fmt.Errorf("%w: --join needs an empty data directory (or one that joined before), and %s holds %d tables; start without --join to serve them, or give another --data", table.ErrPrecondition, s.opts.DataDir, len(tables))
	}
	for _, m := range s.engine.Tables("") {
		if err := s.engine.DeleteTable(m.Instance, m.Name); err != nil {
			return fmt.Errorf("ebbtable: join: clearing a partial copy: %w", err)
		}
	}
	if err := s.engine.PutInstanceMeta(kindJoining, peerInstance, "seed", []byte(seed)); err != nil {
		return err
	}
	ctx, cancel := s.stopCtx(10 * time.Minute)
	defer cancel()
	conn, err := grpc.NewClient("passthrough:///"+seed, s.sec.peerDialOptions(seed, s.opts.MaxMessageBytes)...)
	if err != nil {
		return err
	}
	defer conn.Close()
	out, err := invokeStruct(ctx, conn, MethodJoin, map[string]any{"cluster": s.opts.ClusterID, "addr": s.advertised()})
	if err != nil {
		return fmt.Errorf("ebbtable: join %s: %w", seed, err)
	}
	seedID := out.GetFields()["cluster"].GetStringValue()
	if err := s.engine.SetReplicating(s.opts.ClusterID); err != nil {
		return err
	}
	if err := s.peers.add(peerInfo{ID: seedID, Addr: seed, Ready: true}); err != nil {
		return err
	}
	s.repl.learnPeers(out.GetFields()["peers"].GetListValue())
	if err := s.copyFrom(ctx, conn, seedID); err != nil {
		return fmt.Errorf("ebbtable: join: copying %s's data: %w", seedID, err)
	}
	if err := s.engine.PutInstanceMeta(kindJoined, peerInstance, "seed", []byte(seedID)); err != nil {
		return err
	}
	if err := s.engine.DeleteInstanceMeta(kindJoining, peerInstance, "seed"); err != nil {
		return err
	}
	if _, err := invokeStruct(ctx, conn, MethodReady, map[string]any{"cluster": s.opts.ClusterID}); err != nil {
		return fmt.Errorf("ebbtable: join: telling %s the copy is done: %w", seedID, err)
	}
	s.peers.contact(seedID, nil)
	s.log.Info("joined the instance", "seed", seedID, "peers", len(s.peers.list()))
	return nil
}

// kindJoined marks, in the instance metadata, that this process finished
// joining (its value names the seed); kindJoining that it is copying.
const (
	kindJoined  = "joined"
	kindJoining = "joining"
)

func (s *Server) joinedThrough() (bool, error) {
	found := false
	err := s.engine.InstanceMeta(kindJoined, peerInstance, func(_, _ string, _ []byte) error {
		found = true
		return nil
	})
	return found, err
}

// copyFrom imports the seed's snapshot stream.
func (s *Server) copyFrom(ctx context.Context, conn *grpc.ClientConn, seedID string) error {
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, MethodSnapshot)
	if err != nil {
		return err
	}
	if err := st.SendMsg(&structpb.Struct{}); err != nil {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	local := map[string]*table.Meta{}
	for {
		msg := new(structpb.Struct)
		err := st.RecvMsg(msg)
		if errors.Is(err, io.EOF) {
			return errors.New("snapshot stream ended early")
		}
		if err != nil {
			return err
		}
		f := msg.GetFields()
		key := tableKey(f["instance"].GetStringValue(), f["table"].GetStringValue())
		switch f["kind"].GetStringValue() {
		case "table":
			var pm table.Meta
			if err := json.Unmarshal([]byte(f["schema"].GetStringValue()), &pm); err != nil {
				return err
			}
			m, err := s.engine.ImportTable(&pm)
			if err != nil {
				return err
			}
			local[tableKey(m.Instance, m.Name)] = m
		case "cells", "tombstones":
			m := local[key]
			if m == nil {
				return fmt.Errorf("pairs for unknown table %q", key)
			}
			vals := f["pairs"].GetListValue().GetValues()
			pairs := make([][2][]byte, 0, len(vals)/2)
			for i := 0; i+1 < len(vals); i += 2 {
				k, err1 := base64.StdEncoding.DecodeString(vals[i].GetStringValue())
				v, err2 := base64.StdEncoding.DecodeString(vals[i+1].GetStringValue())
				if err := errors.Join(err1, err2); err != nil {
					return err
				}
				pairs = append(pairs, [2][]byte{k, v})
			}
			kind := table.ExportCells
			if f["kind"].GetStringValue() == "tombstones" {
				kind = table.ExportTombstones
			}
			if err := s.engine.ImportPairs(m, kind, pairs); err != nil {
				return err
			}
		case "checkpoint":
			m := local[key]
			origin := f["origin"].GetStringValue()
			if m == nil || origin == s.opts.ClusterID {
				continue
			}
			p, err := changestream.ParseToken(f["token"].GetStringValue())
			if err != nil {
				return err
			}
			if err := s.engine.SetCheckpoint(m, origin, p); err != nil {
				return err
			}
		case "end":
			closed, err := strconv.ParseInt(f["closed"].GetStringValue(), 10, 64)
			if err != nil {
				return err
			}
			for _, m := range local {
				if err := s.engine.SetCheckpoint(m, seedID, throughClosed(closed)); err != nil {
					return err
				}
			}
			return nil
		}
	}
}
