package server

import (
	"encoding/json"
	"strings"
	"sync"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/replication"
	"github.com/ebbtable/ebbtable/storage"
)

// Instance metadata that travels between clusters with a last-writer-wins
// stamp (docs/replication.md, "Other metadata"): IAM policies, schema
// bundles, authorized views and declared instances. Each change made here
// records, beside the value, a marker (kind metaStampKind, name KIND NUL
// NAME) holding its stamp — the wall-clock time in micros and this
// cluster's id — and whether it was a deletion; a deletion keeps its marker
// as a tombstone. Every pull carries the entries and markers
// (replication.StampedKind entries); a cluster adopts a peer's entry whose
// stamp is later than its own marker (an entry without one counts as
// stamped zero), writing the value or deleting it, with the peer's stamp.
// So the later change wins on every cluster, deletions included.

// metaStampKind keeps the markers.
const metaStampKind = "metastamp"

// stampedKinds are the kinds that travel with stamps.
var stampedKinds = []string{kindIAM, kindSchemaBundle, kindAuthView, kindInstance}

func isStampedKind(kind string) bool {
	for _, k := range stampedKinds {
		if k == kind {
			return true
		}
	}
	return false
}

// metaMarker is a stamped change of one entry.
type metaMarker struct {
	Commit  int64  `json:"c"`
	Cluster string `json:"k"`
	Gone    bool   `json:"gone,omitempty"`
}

func (m metaMarker) stamp() storage.Stamp { return storage.Stamp{Commit: m.Commit, Cluster: m.Cluster} }

// stampedValue is a stamped entry as it travels in a pull.
type stampedValue struct {
	metaMarker
	Value []byte `json:"v,omitempty"`
}

var metaStampMu sync.Mutex // serializes nextMetaStamp
var lastMetaStamp int64

// nextMetaStamp is a stamp for a local change: the clock's micros, kept
// increasing within the process.
func (s *Server) nextMetaStamp() metaMarker {
	metaStampMu.Lock()
	defer metaStampMu.Unlock()
	t := max(clock.Micros(s.opts.Clock.Now()), lastMetaStamp+1)
	lastMetaStamp = t
	return metaMarker{Commit: t, Cluster: s.opts.ClusterID}
}

func markerName(kind, name string) string { return kind + "\x00" + name }

func (s *Server) putMarker(kind, inst, name string, m metaMarker) error {
	v, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return s.engine.PutInstanceMeta(metaStampKind, inst, markerName(kind, name), v)
}

// putMeta stores a stamped kind's entry changed here, with a new stamp.
func (s *Server) putMeta(kind, inst, name string, v []byte) error {
	if err := s.engine.PutInstanceMeta(kind, inst, name, v); err != nil {
		return err
	}
	return s.putMarker(kind, inst, name, s.nextMetaStamp())
}

// deleteMeta deletes a stamped kind's entry here, leaving a tombstone.
func (s *Server) deleteMeta(kind, inst, name string) error {
	if err := s.engine.DeleteInstanceMeta(kind, inst, name); err != nil {
		return err
	}
	m := s.nextMetaStamp()
	m.Gone = true
	return s.putMarker(kind, inst, name, m)
}

// stampedMeta lists the stamped entries and tombstones that travel.
func (s *Server) stampedMeta() ([]replication.MetaEntry, error) {
	type key struct{ inst, name string }
	markers := map[key]metaMarker{}
	if err := s.engine.InstanceMeta(metaStampKind, "", func(inst, name string, v []byte) error {
		var m metaMarker
		if json.Unmarshal(v, &m) == nil {
			markers[key{inst, name}] = m
		}
		return nil
	}); err != nil {
		return nil, err
	}
	var out []replication.MetaEntry
	add := func(inst, name string, sv stampedValue) error {
		b, err := json.Marshal(sv)
		if err != nil {
			return err
		}
		out = append(out, replication.MetaEntry{Kind: replication.StampedKind, Instance: inst, Name: name, Value: string(b)})
		return nil
	}
	for _, kind := range stampedKinds {
		if kind == kindIAM && s.cluster != nil {
			continue // a cluster's policies travel from etcd (clusteriamrepl.go)
		}
		if err := s.engine.InstanceMeta(kind, "", func(inst, name string, v []byte) error {
			k := key{inst, markerName(kind, name)}
			m := markers[k]
			delete(markers, k)
			if m.Gone {
				m = metaMarker{} // a value put back without a stamp (before stamps)
			}
			return add(inst, k.name, stampedValue{metaMarker: m, Value: v})
		}); err != nil {
			return nil, err
		}
	}
	for k, m := range markers {
		if s.cluster != nil && strings.HasPrefix(k.name, kindIAM+"\x00") {
			continue
		}
		if m.Gone {
			if err := add(k.inst, k.name, stampedValue{metaMarker: m}); err != nil {
				return nil, err
			}
		}
	}
	if s.cluster != nil {
		// Left out of this answer if etcd does not answer: a peer adopts
		// only the entries an answer carries, so the pull goes on.
		iam, err := s.clusterIAMEntries() // clusteriamrepl.go
		if err != nil {
			s.log.Warn("replication: the IAM policies left out of a pull's answer", "err", err)
		}
		out = append(out, iam...)
	}
	return out, nil
}

// adoptStampedMeta applies a peer's stamped entries that are later than
// this cluster's. The caller holds the instance server's lock.
func (s *Server) adoptStampedMeta(list []replication.MetaEntry) error {
	type key struct{ inst, name string } // name: KIND NUL NAME
	mine := map[key]metaMarker{}
	if err := s.engine.InstanceMeta(metaStampKind, "", func(inst, name string, v []byte) error {
		var m metaMarker
		if json.Unmarshal(v, &m) == nil {
			mine[key{inst, name}] = m
		}
		return nil
	}); err != nil {
		return err
	}
	have := map[key]bool{}
	for _, kind := range stampedKinds {
		if err := s.engine.InstanceMeta(kind, "", func(inst, name string, _ []byte) error {
			have[key{inst, markerName(kind, name)}] = true
			return nil
		}); err != nil {
			return err
		}
	}
	for _, e := range list {
		if e.Kind != replication.StampedKind {
			continue
		}
		kind, name, ok := strings.Cut(e.Name, "\x00")
		if !ok || !isStampedKind(kind) {
			continue
		}
		if kind == kindIAM && s.cluster != nil {
			continue // adopted into etcd by the puller (clusteriamrepl.go)
		}
		var sv stampedValue
		if err := json.Unmarshal([]byte(e.Value), &sv); err != nil {
			continue
		}
		k := key{e.Instance, e.Name}
		m, marked := mine[k]
		if marked || have[k] {
			// An entry without a marker (kept before stamps) counts as
			// stamped zero.
			if !m.stamp().Less(sv.stamp()) {
				continue
			}
		}
		// A tombstone for an entry this cluster never had is kept all the
		// same, so an older put arriving from a third cluster stays deleted.
		var err error
		switch {
		case !sv.Gone:
			err = s.engine.PutInstanceMeta(kind, e.Instance, name, sv.Value)
		case have[k]:
			err = s.engine.DeleteInstanceMeta(kind, e.Instance, name)
		}
		if err != nil {
			return err
		}
		if err := s.putMarker(kind, e.Instance, name, sv.metaMarker); err != nil {
			return err
		}
	}
	return nil
}
