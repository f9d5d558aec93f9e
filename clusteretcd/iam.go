package clusteretcd

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// IAM policies in cluster mode (instances, tables, authorized views,
// backups): one key per resource, iam/NAME (NAME the resource name), so
// every node reads and enforces the same policy. The value is opaque here (an encoded
// iampb.Policy). A change compares the key's revision, so two nodes never
// both replace the policy they read.

func (m *Member) iamKey(name string) string { return m.key("iam", name) }

// GetIAMPolicy reads a resource's policy and its revision; a resource
// never given one has none (nil, 0).
func (m *Member) GetIAMPolicy(ctx context.Context, name string) ([]byte, int64, error) {
	resp, err := m.cli.Get(ctx, m.iamKey(name))
	if err != nil {
		return nil, 0, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	return resp.Kvs[0].Value, resp.Kvs[0].ModRevision, nil
}

// PutIAMPolicy replaces a policy read at revision rev (0: there was none);
// ErrRecordChanged if it changed since.
func (m *Member) PutIAMPolicy(ctx context.Context, name string, value []byte, rev int64) error {
	return m.putIAMPolicy(ctx, name, value, rev)
}

// putIAMPolicy is PutIAMPolicy, with more writes (also) made in its
// transaction.
func (m *Member) putIAMPolicy(ctx context.Context, name string, value []byte, rev int64, also ...clientv3.Op) error {
	k := m.iamKey(name)
	resp, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).
		Then(append([]clientv3.Op{clientv3.OpPut(k, string(value))}, also...)...).Commit()
	if err != nil {
		return fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: the IAM policy of %s", ErrRecordChanged, name)
	}
	m.ownIAMWrite(name, value, resp.Header.Revision, false)
	return nil
}

// DeleteIAMPolicy removes a resource's policy (a deleted resource's).
func (m *Member) DeleteIAMPolicy(ctx context.Context, name string) error {
	resp, err := m.cli.Delete(ctx, m.iamKey(name))
	if err != nil {
		return fmt.Errorf("ebbtable: etcd: %w", err)
	}
	m.ownIAMWrite(name, nil, resp.Header.Revision, true)
	return nil
}

// GetIAMPolicies reads the policies of names in one request (the
// resources on a request's path); names with none are left out.
func (m *Member) GetIAMPolicies(ctx context.Context, names []string) (map[string][]byte, error) {
	ops := make([]clientv3.Op, len(names))
	for i, n := range names {
		ops[i] = clientv3.OpGet(m.iamKey(n))
	}
	resp, err := m.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	out := make(map[string][]byte, len(names))
	for i, r := range resp.Responses {
		if kvs := r.GetResponseRange().GetKvs(); len(kvs) > 0 {
			out[names[i]] = kvs[0].Value
		}
	}
	return out, nil
}

// ListIAMPolicies returns every stored policy by resource name.
func (m *Member) ListIAMPolicies(ctx context.Context) (map[string][]byte, error) {
	pre := m.iamKey("")
	resp, err := m.cli.Get(ctx, pre, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	out := make(map[string][]byte, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[strings.TrimPrefix(string(kv.Key), pre)] = kv.Value
	}
	return out, nil
}

// The IAM cache. Enforcement reads every policy on a request's path, and
// a read of etcd per request costs more than the read it checks
// (docs/security.md, "Cost"). So the member keeps every iam/ key in its
// cache, loaded with the rest of the prefix and kept current by the same
// watch, revision by revision; a node's own writes are in its cache at
// once. The cache answers only while it is known current: loaded, its
// watch unbroken, and a word from etcd on the watch (an event or the
// answer to a progress request, asked for every IAMProgressEvery) within
// IAMFresh. Otherwise the caller reads etcd itself (GetIAMPolicies,
// ListIAMPolicies) — and fails if etcd cannot be reached — so a node cut
// off from etcd never goes on enforcing a policy that may have changed
// for longer than IAMFresh.

// IAMFresh is how long after its last word from etcd the IAM cache is
// trusted; IAMProgressEvery how often the member asks etcd for one (the
// defaults of Options.IAMFresh and Options.IAMProgressEvery).
const (
	IAMFresh         = 3 * time.Second
	IAMProgressEvery = time.Second
)

type iamEntry struct {
	value []byte
	rev   int64 // the key's mod revision (of its deletion, for a tombstone)
	gone  bool  // a tombstone: deleted by this node at rev
}

type iamCache struct {
	iam    map[string]iamEntry
	synced bool        // loaded, and the watch runs on from the load
	heard  time.Time   // the watch's last word from etcd
	stale  atomic.Bool // the last answer was "not current" (logged once)
}

// applyIAMLocked applies a watched (or loaded) change of iam/name, unless
// the cache holds a newer one (this node's own write).
func (m *Member) applyIAMLocked(name string, kv *mvccpb.KeyValue, del bool) {
	if cur, ok := m.iam[name]; ok && cur.rev > kv.ModRevision {
		return
	}
	if del {
		delete(m.iam, name)
		return
	}
	m.iam[name] = iamEntry{value: kv.Value, rev: kv.ModRevision}
}

// loadedIAMLocked follows a load of the whole prefix: entries this node
// wrote after the load's revision stay.
func (m *Member) loadedIAMLocked(old map[string]iamEntry) {
	for n, e := range old {
		if e.rev > m.rev {
			m.iam[n] = e
		}
	}
	m.synced = true
	m.heardLocked()
}

func (m *Member) heardLocked() { m.heard = m.opts.Clock.Now() }

func (m *Member) lostWatchLocked() { m.synced = false }

// ownIAMWrite puts this node's write of iam/name, committed at rev, in
// the cache.
func (m *Member) ownIAMWrite(name string, value []byte, rev int64, gone bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.iam[name]; ok && cur.rev >= rev {
		return
	}
	m.iam[name] = iamEntry{value: value, rev: rev, gone: gone}
}

// iamCurrent reports whether the cache may answer (logging when
// that changes).
func (m *Member) iamCurrent() bool {
	m.mu.RLock()
	ok := m.synced && m.opts.Clock.Now().Sub(m.heard) < m.opts.IAMFresh
	m.mu.RUnlock()
	if ok == !m.stale.Load() {
		return ok
	}
	if m.stale.CompareAndSwap(ok, !ok) {
		if ok {
			m.log.Info("IAM cache current again: policies read from it")
		} else {
			m.log.Warn("IAM cache may be behind etcd (watch broken or silent): policies read from etcd until it catches up", "fresh", m.opts.IAMFresh)
		}
	}
	return ok
}

// IAMCacheCurrent reports whether the IAM cache answers now (the
// CachedIAM calls): loaded, its watch unbroken and heard from within
// Options.IAMFresh.
func (m *Member) IAMCacheCurrent() bool { return m.iamCurrent() }

// CachedIAMPolicies is GetIAMPolicies from the cache; ok false when the
// cache is not known current (read etcd instead).
func (m *Member) CachedIAMPolicies(names []string) (map[string][]byte, bool) {
	if !m.iamCurrent() {
		return nil, false
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make(map[string][]byte, len(names))
	for _, n := range names {
		if e, ok := m.iam[n]; ok && !e.gone {
			out[n] = e.value
		}
	}
	return out, true
}

// CachedIAMList is ListIAMPolicies from the cache; ok false when the
// cache is not known current.
func (m *Member) CachedIAMList() (map[string][]byte, bool) {
	if !m.iamCurrent() {
		return nil, false
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make(map[string][]byte, len(m.iam))
	for n, e := range m.iam {
		if !e.gone {
			out[n] = e.value
		}
	}
	return out, true
}

// requestProgress asks etcd, every Options.IAMProgressEvery, to tell the watch
// how far it is (a progress notification): the word that keeps the IAM
// cache current when nothing changes.
func (m *Member) requestProgress(wctx context.Context) {
	defer m.wg.Done()
	for {
		select {
		case <-m.stop:
			return
		case <-m.opts.Clock.After(m.opts.IAMProgressEvery):
		}
		m.mu.RLock()
		synced := m.synced
		m.mu.RUnlock()
		if synced {
			if err := m.cli.RequestProgress(wctx); err != nil && wctx.Err() == nil {
				m.log.Warn("etcd watch progress request", "err", err)
			}
			m.confirmQuiet(wctx)
		}
	}
}

// confirmQuiet keeps a quiet cache current when progress requests go
// unanswered. etcd answers one only once its revision has reached the
// start of every watch on the stream, and a watch resumed after a broken
// connection starts at the revision after the last it saw: with no write
// to etcd since, no request was answered, and every node's cache stayed
// "behind" until the next write (TestIAMCacheCurrentWhenQuiet; in
// TestScaleOutIAMCache, after an etcd cut shorter than the lease, so no
// lease lapsed and nothing was written). After two unanswered rounds, a
// read of etcd says the same as a progress notification would: if etcd's
// revision is the one the cache reflects, the cache was current when the
// read was sent.
func (m *Member) confirmQuiet(ctx context.Context) {
	sent := m.opts.Clock.Now()
	m.mu.RLock()
	quiet := m.synced && sent.Sub(m.heard) >= 2*m.opts.IAMProgressEvery
	m.mu.RUnlock()
	if !quiet {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, m.opts.IAMFresh)
	defer cancel()
	resp, err := m.cli.Get(rctx, m.key("quiet")) // any key: its header's revision
	if err != nil {
		return // logged by the progress requests' failures, if etcd is away
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.synced && resp.Header.Revision == m.rev && sent.After(m.heard) {
		m.heard = sent
	}
}

// tableIAMOps returns the compares and puts that carry table's IAM
// policies (its own and its authorized views') along with a change of its
// directory, in the same transaction: each put again with opts (a kept
// directory's lease, or none: a put with no lease detaches a key from
// one). With onlyLeased, only keys under a lease are put. The compares
// fail the transaction if any of them changed, or one was added, since
// they were read.
func (m *Member) tableIAMOps(ctx context.Context, table string, onlyLeased bool, opts ...clientv3.OpOption) ([]clientv3.Cmp, []clientv3.Op, error) {
	k := m.iamKey(table)
	resp, err := m.cli.Txn(ctx).Then(clientv3.OpGet(k), clientv3.OpGet(k+"/", clientv3.WithPrefix())).Commit()
	if err != nil {
		return nil, nil, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	rev := resp.Header.Revision
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(k), "<", rev+1),
		clientv3.Compare(clientv3.ModRevision(k+"/"), "<", rev+1).WithPrefix(),
	}
	var ops []clientv3.Op
	for _, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().GetKvs() {
			if onlyLeased && kv.Lease == 0 {
				continue
			}
			ops = append(ops, clientv3.OpPut(string(kv.Key), string(kv.Value), opts...))
		}
	}
	return cmps, ops, nil
}

// DeleteInstanceIAM drops the IAM policy of instance inst, only if the
// cluster has no table of it (no directory, none kept for an undelete):
// a deleted instance's policy must not govern a new instance of the
// name, and must not stop governing tables the cluster still serves.
// A policy it drops leaves gone, the deletion's stamp (iamstamp.go), as a
// tombstone that travels to peer clusters. It reports whether it did.
func (m *Member) DeleteInstanceIAM(ctx context.Context, inst string, gone []byte) (bool, error) {
	k := m.iamKey(inst)
	drop := clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), ">", 0)},
		[]clientv3.Op{clientv3.OpDelete(k), clientv3.OpPut(m.iamStampKey(inst), string(gone))}, nil)
	resp, err := m.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(m.dirKey(inst+"/")), "=", 0).WithPrefix(),
		clientv3.Compare(clientv3.CreateRevision(m.deletedKey(inst+"/")), "=", 0).WithPrefix(),
	).Then(drop).Commit()
	if err != nil {
		return false, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if resp.Succeeded {
		m.ownIAMWrite(inst, nil, resp.Header.Revision, true)
	}
	return resp.Succeeded, nil
}
