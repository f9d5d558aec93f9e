package storage

import (
	"regexp"
	"strconv"
)

// refMarker is the name of Pebble's reference marker of a shared object
// (objstorageprovider's sharedObjectRefName): the object's name
// (HASH-CREATOR-FILENUM.sst or .blob), ".ref.", the referencing
// database's creator id and its file number.
var refMarker = regexp.MustCompile(`^([0-9a-f]{4}-[0-9]+-[0-9]+\.(?:sst|blob))\.ref\.([0-9]+)\.[0-9]+$`)

// Releasing a node given up for good (docs/scale-out.md, "Automatic
// failover"): once every tablet of a dead node was rebuilt elsewhere, its
// commit log, checkpoints and catalogs serve nothing, and its reference
// markers on shared SSTables would keep objects nobody reads in the store
// forever. Pebble names a marker OBJECT.ref.CREATOR.FILENUM (one per
// referencing database) and deletes OBJECT when it drops the last marker;
// a database that never comes back never drops its own.

// ReleasedMarker names the object that says node was given up and its
// shared objects released: its old data directory must not be used again
// (its SSTables may be gone).
func ReleasedMarker(node string) string { return "ebbtable-released-" + node }

// DeleteCommitLog deletes every object of node's commit log.
func DeleteCommitLog(st ObjectStore, node string) error {
	objs, err := listLog(st, node)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := st.Delete(o.name); err != nil && !st.IsNotExistError(err) {
			return err
		}
	}
	return nil
}

// ReleaseSharedRefs deletes the reference markers of the databases with
// the given creator ids (one listing of the store for all), and each
// object left with no marker, as Pebble does when a database lets go of
// an object. It returns how many markers and objects it deleted.
func ReleaseSharedRefs(st ObjectStore, creators ...uint64) (refs, objects int, err error) {
	if len(creators) == 0 {
		return 0, 0, nil
	}
	names, err := st.List("", "")
	if err != nil {
		return 0, 0, err
	}
	mine := map[string]bool{}
	for _, c := range creators {
		mine[strconv.FormatUint(c, 10)] = true
	}
	for _, n := range names {
		m := refMarker.FindStringSubmatch(n)
		if m == nil || !mine[m[2]] {
			continue // not Pebble's marker, or another database's
		}
		i := len(m[1])
		if err := st.Delete(n); err != nil && !st.IsNotExistError(err) {
			return refs, objects, err
		}
		refs++
		obj := n[:i]
		others, err := st.List(obj+".ref.", "")
		if err != nil {
			return refs, objects, err
		}
		if len(others) > 0 {
			continue
		}
		if err := st.Delete(obj); err != nil && !st.IsNotExistError(err) {
			return refs, objects, err
		}
		objects++
	}
	return refs, objects, nil
}
