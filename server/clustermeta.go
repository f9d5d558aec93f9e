package server

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"github.com/ebbtable/ebbtable/internal/durable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// Instance metadata in cluster mode (docs/scale-out.md, "Instance
// metadata"): the clusters and app profiles written through the
// InstanceAdmin API are kept in etcd (meta/KIND/INSTANCE/NAME,
// clusteretcd/meta.go), so every node answers alike. Each node mirrors
// them into its own metadata, where every reader of instance.go finds
// them as before: the node that takes a write writes etcd, then mirrors;
// an InstanceAdmin read mirrors what etcd holds first (one etcd read:
// a profile made through one node is there through any other at once);
// and every node mirrors in the background whenever its etcd watch sees a
// change, which keeps the data path's profile cache (cachedProfile)
// current within the watch's delay. Outside a cluster nothing changes:
// the records stay in the node's metadata.

// clusterMetaKinds are the instance metadata kinds kept in etcd.
var clusterMetaKinds = []string{kindCluster, kindAppProfile, kindAppProfileGone}

// clusterMetaMovedFile marks a data directory whose clusters and app
// profiles were copied into etcd (moveLocalMeta): once per directory.
const clusterMetaMovedFile = ".cluster-meta-moved"

// metaReadWait bounds the etcd read of an InstanceAdmin read; past it
// the node answers from its mirror (perhaps behind).
const metaReadWait = 1500 * time.Millisecond

// metaMirror is what a node has mirrored from etcd.
type metaMirror struct {
	mu      sync.Mutex
	applied map[string]string // kind\x00instance\x00name → the value mirrored ("": deleted)
	// createGate, if set (tests), runs before a create's etcd write.
	createGate func()
	// iamSweep is the sweep of IAM stamps (clusteriamsweep.go).
	iamSweep iamSweep
}

func (a *instanceServer) clusterMember() *clusterMember {
	if c := a.s.cluster; c != nil && c.m != nil {
		return c
	}
	return nil
}

// storeMeta stores a record (removing the record of kind replace of the
// same instance and name, if replace is not empty): in etcd and then the
// node's metadata in cluster mode, else in the node's metadata.
func (a *instanceServer) storeMeta(replace, kind, inst, name string, v []byte) error {
	c := a.clusterMember()
	if c == nil {
		if replace == "" {
			return a.s.engine.PutInstanceMeta(kind, inst, name, v)
		}
		return a.s.engine.ReplaceInstanceMeta(replace, kind, inst, name, v)
	}
	return c.writeMeta(metaEntries(replace, kind, inst, name, v))
}

// metaEntries are the etcd writes of storing a record: the record, and
// the deletion of the record of kind replace of the same name, if any.
func metaEntries(replace, kind, inst, name string, v []byte) []clusteretcd.MetaEntry {
	es := []clusteretcd.MetaEntry{{Kind: kind, Instance: inst, Name: name, Value: v}}
	if replace != "" {
		es = append(es, clusteretcd.MetaEntry{Kind: replace, Instance: inst, Name: name})
	}
	return es
}

// createMeta is storeMeta for a new record: in cluster mode it writes
// only if etcd holds no record of kind for the name (never written, or
// deleted), in one etcd transaction, so of two nodes creating the same
// name at once exactly one succeeds and the other gets AlreadyExists.
func (a *instanceServer) createMeta(replace, kind, inst, name string, v []byte) error {
	c := a.clusterMember()
	if c == nil {
		return a.storeMeta(replace, kind, inst, name, v)
	}
	es := metaEntries(replace, kind, inst, name, v)
	if g := c.meta.createGate; g != nil {
		g()
	}
	ctx, cancel := etcdCtx()
	defer cancel()
	ok, err := c.m.PutMetaIfVacant(ctx, es[0], es...)
	if err != nil {
		return status.Errorf(codes.Unavailable, "%v", err)
	}
	if err := c.mirrorMeta(ctx); err != nil {
		return status.Errorf(codes.Unavailable, "%v", err)
	}
	if !ok {
		return status.Errorf(codes.AlreadyExists, "ebbtable: %s %s/%s already exists (made through another node)", kind, inst, name)
	}
	return nil
}

// createCluster stores a cluster CreateCluster makes (createMeta).
func (a *instanceServer) createCluster(inst, id string, c *adminpb.Cluster) error {
	v, err := protojson.Marshal(c)
	if err != nil {
		return err
	}
	return a.createMeta("", kindCluster, inst, id, v)
}

// putInstance stores a declared instance (CreateInstance, UpdateInstance,
// PartialUpdateInstance) with a new stamp (metarepl.go): in cluster mode
// the declaration and its stamp marker go to etcd in one transaction and
// every node mirrors both, so every node answers GetInstance and
// ListInstances alike and any node's pull carries the stamped change.
func (a *instanceServer) putInstance(p *adminpb.Instance) error {
	v, err := protojson.Marshal(p)
	if err != nil {
		return err
	}
	c := a.clusterMember()
	if c == nil {
		return a.s.putMeta(kindInstance, p.GetName(), "", v) // metarepl.go
	}
	m, err := json.Marshal(a.s.nextMetaStamp())
	if err != nil {
		return err
	}
	return c.writeMeta([]clusteretcd.MetaEntry{
		{Kind: kindInstance, Instance: p.GetName(), Value: v},
		{Kind: metaStampKind, Instance: p.GetName(), Name: markerName(kindInstance, ""), Value: m},
	})
}

// declareInstance stores a new declared instance with its clusters
// (CreateInstance). In cluster mode all of it goes to etcd in one
// transaction, only if etcd holds no declaration of the instance (never
// declared, or deleted): of two nodes creating the same instance at once
// exactly one succeeds, and the other gets AlreadyExists with nothing of
// its request written.
func (a *instanceServer) declareInstance(p *adminpb.Instance, clusters map[string]*adminpb.Cluster) error {
	inst := p.GetName()
	c := a.clusterMember()
	if c == nil {
		for id, cl := range clusters {
			if err := a.putCluster(inst, id, cl); err != nil {
				return err
			}
		}
		return a.putInstance(p)
	}
	v, err := protojson.Marshal(p)
	if err != nil {
		return err
	}
	m, err := json.Marshal(a.s.nextMetaStamp())
	if err != nil {
		return err
	}
	decl := clusteretcd.MetaEntry{Kind: kindInstance, Instance: inst, Value: v}
	es := []clusteretcd.MetaEntry{decl, {Kind: metaStampKind, Instance: inst, Name: markerName(kindInstance, ""), Value: m}}
	for id, cl := range clusters {
		cv, err := protojson.Marshal(cl)
		if err != nil {
			return err
		}
		es = append(es, clusteretcd.MetaEntry{Kind: kindCluster, Instance: inst, Name: id, Value: cv})
	}
	if g := c.meta.createGate; g != nil {
		g()
	}
	ctx, cancel := etcdCtx()
	defer cancel()
	ok, err := c.m.PutMetaIfVacant(ctx, decl, es...)
	if err != nil {
		return status.Errorf(codes.Unavailable, "%v", err)
	}
	if err := c.mirrorMeta(ctx); err != nil {
		return status.Errorf(codes.Unavailable, "%v", err)
	}
	if !ok {
		return status.Errorf(codes.AlreadyExists, "ebbtable: instance %s already exists (made through another node)", inst)
	}
	return nil
}

// dropInstanceMeta, in cluster mode, deletes in etcd the records of inst
// it holds (its declaration with a stamped tombstone, its clusters and
// app profiles), so DeleteInstance through one node deletes them on
// every node and a restart does not bring them back.
func (a *instanceServer) dropInstanceMeta(inst string) error {
	c := a.clusterMember()
	if c == nil {
		return nil
	}
	ctx, cancel := etcdCtx()
	defer cancel()
	all, _, err := c.m.ListMeta(ctx)
	if err != nil {
		return status.Errorf(codes.Unavailable, "%v", err)
	}
	var es []clusteretcd.MetaEntry
	for _, e := range all {
		if e.Instance == inst && len(e.Value) > 0 && e.Kind != metaStampKind {
			es = append(es, clusteretcd.MetaEntry{Kind: e.Kind, Instance: inst, Name: e.Name})
		}
	}
	gone := a.s.nextMetaStamp()
	gone.Gone = true
	m, err := json.Marshal(gone)
	if err != nil {
		return err
	}
	es = append(es, clusteretcd.MetaEntry{Kind: metaStampKind, Instance: inst, Name: markerName(kindInstance, ""), Value: m})
	return c.writeMeta(es)
}

// dropClusterTables, in cluster mode, deletes every table of inst through
// the schema log, as DeleteTable does (kept for the undelete retention), so
// DeleteInstance through one node deletes them on every node. A node's own
// engine.DeleteTable would have left them in the cluster's schema and
// directories, served by the other nodes.
func (a *instanceServer) dropClusterTables(ctx context.Context, inst string) error {
	c := a.clusterMember()
	if c == nil {
		return nil
	}
	for _, m := range a.s.engine.Tables(inst) {
		ref := tableRef{instance: inst, table: m.Name}
		req := &adminpb.DeleteTableRequest{Name: ref.name()}
		if _, err := c.propose(ctx, "DeleteTable", ref, req, clusteretcd.DirOp{Drop: true, Keep: true, KeepFor: c.keepDeletedFor()}); err != nil && status.Code(err) != codes.NotFound {
			return err
		}
	}
	return nil
}

// dropMeta deletes a record, cluster-wide in cluster mode.
func (a *instanceServer) dropMeta(kind, inst, name string) error {
	c := a.clusterMember()
	if c == nil {
		return a.s.engine.DeleteInstanceMeta(kind, inst, name)
	}
	return c.writeMeta([]clusteretcd.MetaEntry{{Kind: kind, Instance: inst, Name: name}})
}

// syncMeta, in cluster mode, mirrors what etcd holds before an
// InstanceAdmin call reads the node's metadata. With etcd out of reach
// the call goes on with what the node mirrored last.
func (a *instanceServer) syncMeta() {
	c := a.clusterMember()
	if c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), metaReadWait)
	defer cancel()
	if err := c.mirrorMeta(ctx); err != nil {
		a.s.log.Warn("instance metadata: etcd unreachable, answering from this node's copy", "err", err)
	}
}

func (c *clusterMember) writeMeta(es []clusteretcd.MetaEntry) error {
	ctx, cancel := etcdCtx()
	defer cancel()
	if err := c.m.PutMeta(ctx, es...); err != nil {
		return status.Errorf(codes.Unavailable, "%v", err)
	}
	if err := c.mirrorMeta(ctx); err != nil {
		return status.Errorf(codes.Unavailable, "%v", err)
	}
	return nil
}

// mirrorMeta applies to the node's metadata every record of etcd that
// changed since it last did: the value, or a deletion. Records the node
// holds that etcd has never seen (a peer cluster's, adopted by
// adoptPeerMeta) are left alone.
func (c *clusterMember) mirrorMeta(ctx context.Context) error {
	all, _, err := c.m.ListMeta(ctx)
	if err != nil {
		return err
	}
	mm := &c.meta
	mm.mu.Lock()
	defer mm.mu.Unlock()
	if mm.applied == nil {
		mm.applied = map[string]string{}
	}
	changed := false
	for _, e := range all {
		k := e.Kind + "\x00" + e.Instance + "\x00" + e.Name
		if v, ok := mm.applied[k]; ok && v == string(e.Value) {
			continue
		}
		var err error
		if len(e.Value) == 0 {
			err = c.s.engine.DeleteInstanceMeta(e.Kind, e.Instance, e.Name)
		} else {
			err = c.s.engine.PutInstanceMeta(e.Kind, e.Instance, e.Name, e.Value)
		}
		if err != nil {
			return err
		}
		mm.applied[k] = string(e.Value)
		changed = true
	}
	if changed && c.s.inst != nil {
		c.s.inst.forgetProfiles()
	}
	return nil
}

// metaLoop mirrors etcd's records whenever the member's view of etcd
// changes (the profile cache of the data path follows).
func (c *clusterMember) metaLoop() {
	defer c.wg.Done()
	// Only a change of the metadata itself is read again: the cache
	// changes at every progress mark, schema entry and checkpoint of the
	// cluster, and each read lists every record.
	var mirrored uint64
	current := false
	for {
		ch := c.m.Changed()
		if seen := c.m.MetaChanges(); !current || seen != mirrored {
			ctx, cancel := etcdCtx()
			err := c.mirrorMeta(ctx)
			cancel()
			if err != nil {
				c.s.log.Warn("instance metadata: mirroring etcd", "err", err)
			}
			current, mirrored = err == nil, seen
		}
		select {
		case <-c.stop:
			return
		case <-ch:
		}
	}
}

// moveLocalMeta copies the clusters and app profiles (and profile
// deletions) this node kept in its metadata — written before cluster mode
// kept them in etcd — into etcd, once per data directory
// (clusterMetaMovedFile), at start: a record etcd already holds for the
// name wins (another node's copy, or one written since), and for an app
// profile its deletion counts as holding it.
func (c *clusterMember) moveLocalMeta(ctx context.Context) error {
	if err := c.moveLocalInstances(ctx); err != nil {
		return err
	}
	marker := filepath.Join(c.s.opts.DataDir, clusterMetaMovedFile)
	if _, err := os.Stat(marker); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var all []clusteretcd.MetaEntry
	for _, kind := range clusterMetaKinds {
		if err := c.s.engine.InstanceMeta(kind, "", func(inst, name string, v []byte) error {
			all = append(all, clusteretcd.MetaEntry{Kind: kind, Instance: inst, Name: name, Value: append([]byte(nil), v...)})
			return nil
		}); err != nil {
			return err
		}
	}
	copied := 0
	for _, e := range all {
		absent := []clusteretcd.MetaEntry{e}
		put := []clusteretcd.MetaEntry{e}
		switch e.Kind {
		case kindAppProfile, kindAppProfileGone:
			other := kindAppProfileGone
			if e.Kind == kindAppProfileGone {
				other = kindAppProfile
			}
			o := clusteretcd.MetaEntry{Kind: other, Instance: e.Instance, Name: e.Name}
			absent, put = append(absent, o), append(put, o)
		}
		ok, err := c.m.PutMetaIfAbsent(ctx, absent, put...)
		if err != nil {
			return err
		}
		if ok {
			copied++
		}
	}
	if len(all) > 0 {
		c.s.log.Info("clusters and app profiles of this node's metadata moved to etcd (once per data directory)", "copied", copied, "etcd_had", len(all)-copied)
	}
	return durable.ReplaceFile(marker, []byte(strconv.Itoa(copied)+"\n"))
}

// clusterInstancesMovedFile marks a data directory whose declared
// instances were copied into etcd (moveLocalInstances): once per directory.
const clusterInstancesMovedFile = ".cluster-instances-moved"

// moveLocalInstances copies the declared instances (labels, display name…)
// this node kept in its metadata — before cluster mode kept them in etcd —
// into etcd with their stamp markers, once per data directory, where etcd
// holds no declaration for the instance yet (another node's copy, or one
// written since, wins).
func (c *clusterMember) moveLocalInstances(ctx context.Context) error {
	marker := filepath.Join(c.s.opts.DataDir, clusterInstancesMovedFile)
	if _, err := os.Stat(marker); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var all []clusteretcd.MetaEntry
	if err := c.s.engine.InstanceMeta(kindInstance, "", func(inst, name string, v []byte) error {
		all = append(all, clusteretcd.MetaEntry{Kind: kindInstance, Instance: inst, Name: name, Value: append([]byte(nil), v...)})
		return nil
	}); err != nil {
		return err
	}
	copied := 0
	for _, e := range all {
		put := []clusteretcd.MetaEntry{e}
		mk := markerName(kindInstance, e.Name)
		if err := c.s.engine.InstanceMeta(metaStampKind, e.Instance, func(_, name string, v []byte) error {
			if name == mk {
				put = append(put, clusteretcd.MetaEntry{Kind: metaStampKind, Instance: e.Instance, Name: mk, Value: append([]byte(nil), v...)})
			}
			return nil
		}); err != nil {
			return err
		}
		ok, err := c.m.PutMetaIfAbsent(ctx, []clusteretcd.MetaEntry{e}, put...)
		if err != nil {
			return err
		}
		if ok {
			copied++
		}
	}
	if len(all) > 0 {
		c.s.log.Info("declared instances of this node's metadata moved to etcd (once per data directory)", "copied", copied, "etcd_had", len(all)-copied)
	}
	return durable.ReplaceFile(marker, []byte(strconv.Itoa(copied)+"\n"))
}

// checkForwardedProfile checks the app profile of a request another node
// of the cluster forwarded to this tablet owner: the forwarding node does
// not resolve it (clusterdata.go routes by tablet only). A profile this
// node's mirror does not hold yet (made through the other node a moment
// ago) is looked up in etcd once before the call is refused.
func (a *instanceServer) checkForwardedProfile(inst, id string, transactional bool) error {
	_, err := a.checkProfile(inst, id, transactional)
	if status.Code(err) == codes.NotFound && a.clusterMember() != nil {
		a.syncMeta()
		_, err = a.checkProfile(inst, id, transactional)
	}
	return err
}
