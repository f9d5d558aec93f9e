package server

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/ebbtable/ebbtable/replication"
	"github.com/ebbtable/ebbtable/storage"
)

// IAM policies travel by replication to and from a cluster of several
// nodes (docs/replication.md, "Other metadata"). There they live in etcd
// (clusteriam.go), each beside its stamp (clusteretcd/iamstamp.go), the
// same last-writer-wins marker a single process keeps in its metadata
// (metarepl.go):
//   - a policy set through any node is stamped in the transaction that
//     stores it (storeIAM); every node serves etcd's policies and stamps
//     to the peers that pull from it (stampedMeta);
//   - the node that pulls for the cluster adopts a peer's stamped policies
//     into etcd (adoptAndShare), each only if its stamp is later than the
//     one etcd keeps. An adopted policy keeps the peer's stamp, so served
//     back to the peer it is not later than the peer's own: nothing goes
//     back and forth.
// The other nodes enforce it from etcd like any policy (their watch-fed
// cache), so the node metadata of a cluster holds no peer policy.

// clusterIAMEntries lists etcd's stamped policies as they travel, with
// the tombstones of policies a peer's deletion removed.
func (s *Server) clusterIAMEntries() ([]replication.MetaEntry, error) {
	if s.cluster.m == nil {
		return nil, errors.New("ebbtable: the node is not in its cluster yet")
	}
	ctx, cancel := context.WithTimeout(context.Background(), iamTimeout)
	defer cancel()
	all, err := s.cluster.m.StampedIAMPolicies(ctx)
	if err != nil {
		return nil, err
	}
	var out []replication.MetaEntry
	for n, e := range all {
		var m metaMarker
		if e.Stamp != nil && json.Unmarshal(e.Stamp, &m) != nil {
			continue
		}
		if e.Value == nil && !m.Gone {
			continue // a stamp the resource's deletion left (not a deletion that travels)
		}
		if e.Value != nil {
			m.Gone = false
		}
		inst, rest, err := iamKey(n) // etcd keys a policy by its resource's name
		if err != nil {
			continue
		}
		b, err := json.Marshal(stampedValue{metaMarker: m, Value: e.Value})
		if err != nil {
			return nil, err
		}
		out = append(out, replication.MetaEntry{Kind: replication.StampedKind, Instance: inst, Name: markerName(kindIAM, rest), Value: string(b)})
	}
	return out, nil
}

// stampedIAM reads a peer's metadata entry as a stamped IAM policy: the
// resource's name below its instance and the stamped value; false for an
// entry of another kind or one that does not decode.
func stampedIAM(e replication.MetaEntry) (rest string, sv stampedValue, ok bool) {
	if e.Kind != replication.StampedKind {
		return "", sv, false
	}
	kind, rest, ok := strings.Cut(e.Name, "\x00")
	if !ok || kind != kindIAM {
		return "", sv, false
	}
	if json.Unmarshal([]byte(e.Value), &sv) != nil {
		return "", sv, false
	}
	return rest, sv, true
}

// adoptClusterIAM adopts into etcd a peer's stamped policies later than
// those etcd keeps. An entry already handled (the same stamp as the last
// time) is skipped without asking etcd: every pull carries them all.
func (s *Server) adoptClusterIAM(list []replication.MetaEntry) error {
	k := s.cluster.sink
	for _, e := range list {
		rest, sv, ok := stampedIAM(e)
		if !ok {
			continue
		}
		key := e.Instance + "\x00" + rest
		k.mu.Lock()
		seen, done := k.iamSeen[key]
		k.mu.Unlock()
		if done && seen == sv.stamp() {
			continue
		}
		name := strings.TrimSuffix(e.Instance+"/"+rest, "/")
		var value []byte
		if !sv.Gone {
			value = sv.Value
			if value == nil {
				value = []byte{}
			}
		}
		stamp, err := json.Marshal(sv.metaMarker)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), iamTimeout)
		adopted, err := s.cluster.m.AdoptIAMPolicy(ctx, name, value, stamp, func(kept []byte) bool {
			var m metaMarker
			if kept != nil && json.Unmarshal(kept, &m) != nil {
				return false
			}
			// A policy without a stamp (set before stamps) counts as
			// stamped zero, as in metarepl.go.
			return m.stamp().Less(sv.stamp())
		})
		cancel()
		if err != nil {
			return err
		}
		if adopted {
			s.log.Debug("replication: adopted a peer's IAM policy", "resource", name, "deleted", sv.Gone)
		}
		k.mu.Lock()
		if k.iamSeen == nil {
			k.iamSeen = map[string]storage.Stamp{}
		}
		k.iamSeen[key] = sv.stamp()
		k.mu.Unlock()
	}
	return nil
}
