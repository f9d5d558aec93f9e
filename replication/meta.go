package replication

import "strconv"

// Instance metadata between clusters: every pull carries the peer's
// clusters and app profiles (with the tombstones of deleted profiles), and
// the puller's cluster adopts what it lacks or holds older.

// StampedKind is the kind of the entries of other instance metadata that
// travel with pulls: the server's own kinds, each entry's value carrying a
// last-writer-wins stamp the server compares (MergeMeta ignores them).
const StampedKind = "stamped"

// MetaKinds names the kinds of instance metadata that travel (the server's
// storage kinds).
type MetaKinds struct {
	Cluster, Profile, ProfileGone string
}

// MetaChange is one entry a cluster adopts. Replace is the kind the same
// write removes for the entry's name (a profile replaces its tombstone and
// a tombstone its profile); "" for a plain put.
type MetaChange struct {
	MetaEntry
	Replace string
}

// MergeMeta decides which of a peer's entries a cluster (self, holding
// local) adopts: the clusters it lacks (never itself); a profile changed
// later than its own profile or tombstone; a tombstone (its value the
// deletion time, decimal micros) later than both. etag is when a stored
// profile last changed. The later of a profile's change and its deletion
// wins on every cluster; entries of other kinds are ignored. Every entry
// is judged against local as it was before the pull.
func MergeMeta(self string, local, peer []MetaEntry, kinds MetaKinds, etag func(value string) int64) []MetaChange {
	key := func(kind, inst, name string) string { return kind + "\x00" + inst + "\x00" + name }
	have := make(map[string]string, len(local))
	for _, e := range local {
		have[key(e.Kind, e.Instance, e.Name)] = e.Value
	}
	// changed is when a local profile or tombstone was last changed, and
	// whether there is either.
	changed := func(inst, name string) (t int64, ok bool) {
		if v, gone := have[key(kinds.ProfileGone, inst, name)]; gone {
			t, _ = strconv.ParseInt(v, 10, 64)
			ok = true
		}
		if v, there := have[key(kinds.Profile, inst, name)]; there {
			t, ok = max(t, etag(v)), true
		}
		return t, ok
	}
	var out []MetaChange
	for _, e := range peer {
		switch e.Kind {
		case kinds.Cluster:
			if _, ok := have[key(e.Kind, e.Instance, e.Name)]; ok || e.Name == self {
				continue
			}
			out = append(out, MetaChange{MetaEntry: e})
		case kinds.Profile:
			if mine, ok := changed(e.Instance, e.Name); ok && etag(e.Value) <= mine {
				continue
			}
			out = append(out, MetaChange{MetaEntry: e, Replace: kinds.ProfileGone})
		case kinds.ProfileGone:
			t, _ := strconv.ParseInt(e.Value, 10, 64)
			if mine, ok := changed(e.Instance, e.Name); ok && t <= mine {
				continue
			}
			out = append(out, MetaChange{MetaEntry: e, Replace: kinds.Profile})
		}
	}
	return out
}
