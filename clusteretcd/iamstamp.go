package clusteretcd

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The stamps of IAM policies that travel by replication to and from peer
// clusters (docs/replication.md, "Other metadata"): iamstamp/NAME beside
// iam/NAME holds the last change's stamp (opaque here: the server's
// last-writer-wins marker), a deletion's kept as a tombstone. A policy set
// through any node gets a new stamp in the transaction that stores it; a
// peer's policy is adopted with the peer's stamp only if it is later than
// the one kept (AdoptIAMPolicy), so an adopted policy served back to the
// peer is not later than its own and nothing goes back and forth.

func (m *Member) iamStampKey(name string) string { return m.key("iamstamp", name) }

// PutIAMPolicyStamped is PutIAMPolicy that also records the change's stamp.
func (m *Member) PutIAMPolicyStamped(ctx context.Context, name string, value []byte, rev int64, stamp []byte) error {
	return m.putIAMPolicy(ctx, name, value, rev, clientv3.OpPut(m.iamStampKey(name), string(stamp)))
}

// StampedIAM is a policy with its stamp as kept in etcd; Value nil for a
// tombstone (a stamp with no policy), Stamp nil for a policy never stamped.
type StampedIAM struct {
	Value, Stamp []byte
	// StampRev is the stamp key's mod revision (0: none), to compare
	// when it is replaced (ReplaceIAMStamp).
	StampRev int64
}

// StampedIAMPolicies reads every policy and stamp at one revision, by
// resource name.
func (m *Member) StampedIAMPolicies(ctx context.Context) (map[string]StampedIAM, error) {
	pre, spre := m.iamKey(""), m.iamStampKey("")
	resp, err := m.cli.Txn(ctx).Then(clientv3.OpGet(pre, clientv3.WithPrefix()), clientv3.OpGet(spre, clientv3.WithPrefix())).Commit()
	if err != nil {
		return nil, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	out := map[string]StampedIAM{}
	for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
		n := strings.TrimPrefix(string(kv.Key), pre)
		e := out[n]
		e.Value = kv.Value
		out[n] = e
	}
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		n := strings.TrimPrefix(string(kv.Key), spre)
		e := out[n]
		e.Stamp, e.StampRev = kv.Value, kv.ModRevision
		out[n] = e
	}
	return out, nil
}

// AdoptIAMPolicy stores a peer's policy (value; nil deletes it) with its
// stamp if later(the stamp kept, nil if none) says the peer's is later,
// in a transaction that compares both keys (retried when another node
// changed either meanwhile). It reports whether it stored it.
func (m *Member) AdoptIAMPolicy(ctx context.Context, name string, value []byte, stamp []byte, later func(kept []byte) bool) (bool, error) {
	k, sk := m.iamKey(name), m.iamStampKey(name)
	for {
		resp, err := m.cli.Txn(ctx).Then(clientv3.OpGet(k), clientv3.OpGet(sk)).Commit()
		if err != nil {
			return false, fmt.Errorf("ebbtable: etcd: %w", err)
		}
		var rev, srev int64
		var kept []byte
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			rev = kvs[0].ModRevision
		}
		if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
			srev, kept = kvs[0].ModRevision, kvs[0].Value
		}
		if !later(kept) {
			return false, nil
		}
		op := clientv3.OpDelete(k)
		if value != nil {
			op = clientv3.OpPut(k, string(value))
		}
		tr, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev), clientv3.Compare(clientv3.ModRevision(sk), "=", srev)).
			Then(op, clientv3.OpPut(sk, string(stamp))).Commit()
		if err != nil {
			return false, fmt.Errorf("ebbtable: etcd: %w", err)
		}
		if tr.Succeeded {
			m.ownIAMWrite(name, value, tr.Header.Revision, value == nil)
			return true, nil
		}
	}
}

// DropIAMPolicyStamped removes a deleted resource's policy and leaves
// gone, the deletion's stamp, as a tombstone that travels to peer
// clusters, in one transaction. A resource with no policy is left alone.
func (m *Member) DropIAMPolicyStamped(ctx context.Context, name string, gone []byte) error {
	k := m.iamKey(name)
	resp, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), ">", 0)).
		Then(clientv3.OpDelete(k), clientv3.OpPut(m.iamStampKey(name), string(gone))).Commit()
	if err != nil {
		return fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if resp.Succeeded {
		m.ownIAMWrite(name, nil, resp.Header.Revision, true)
	}
	return nil
}

// ReplaceIAMStamp replaces the stamp of a resource that has no policy
// (a tombstone) with stamp, or removes it if stamp is nil, only if the
// stamp is still the one read at rev and no policy was set meanwhile. It
// reports whether it did.
func (m *Member) ReplaceIAMStamp(ctx context.Context, name string, rev int64, stamp []byte) (bool, error) {
	sk := m.iamStampKey(name)
	op := clientv3.OpDelete(sk)
	if stamp != nil {
		op = clientv3.OpPut(sk, string(stamp))
	}
	resp, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(sk), "=", rev), clientv3.Compare(clientv3.CreateRevision(m.iamKey(name)), "=", 0)).
		Then(op).Commit()
	if err != nil {
		return false, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	return resp.Succeeded, nil
}

// IAMTombstones reads, at one revision, the stamps of resources that have
// no policy (tombstones, and stamps a drop left behind), by resource name
// (Value nil). The policies are read keys only: a sweep of the stamps
// costs little more than the stamps themselves.
func (m *Member) IAMTombstones(ctx context.Context) (map[string]StampedIAM, error) {
	pre, spre := m.iamKey(""), m.iamStampKey("")
	resp, err := m.cli.Txn(ctx).Then(clientv3.OpGet(pre, clientv3.WithPrefix(), clientv3.WithKeysOnly()), clientv3.OpGet(spre, clientv3.WithPrefix())).Commit()
	if err != nil {
		return nil, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	live := map[string]bool{}
	for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
		live[strings.TrimPrefix(string(kv.Key), pre)] = true
	}
	out := map[string]StampedIAM{}
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		if n := strings.TrimPrefix(string(kv.Key), spre); !live[n] {
			out[n] = StampedIAM{Stamp: kv.Value, StampRev: kv.ModRevision}
		}
	}
	return out, nil
}
