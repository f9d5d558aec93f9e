package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ebbtable/ebbtable/clusteretcd"
	"github.com/ebbtable/ebbtable/internal/durable"
	"github.com/ebbtable/ebbtable/storage"
)

// A node id started again on an empty data directory (docs/scale-out.md,
// "Automatic failover", "An empty data directory under an old node id").
// With --failover the shared store may hold the node id's catalog,
// checkpoints and commit log: its previous engine's acknowledged state,
// which only a take-over may rebuild. The new engine holds none of it, so:
//
//   - while a tablet directory still names the node id the owner of a
//     tablet (its old engine died and its tablets were not taken over
//     yet), the node is refused before its engine opens: joining, it would
//     serve those tablets empty, and its first checkpoint round would
//     replace the old catalog and truncate the old log, so no take-over
//     could rebuild them any more. Once its lease expired, the others take
//     its tablets over; then it may start;
//   - once none names it, the old state is its previous engine's, released
//     as a dead node's is: the new engine does not seed its catalog from it
//     (its first round replaces the catalog and deletes the old
//     checkpoints and log records), and the old creator id's reference
//     markers are deleted, with each shared object no other database
//     references.
//
// The marker file says the data directory started empty and has not yet
// finished starting (a refused or failed start opens the engine, which
// writes a MANIFEST: the retry must still know).

// clusterFreshFile marks a data directory that started empty and has not
// yet finished its first start.
const clusterFreshFile = ".cluster-fresh"

// errOwnedElsewhere: a node id started on an empty data directory still
// owns tablets whose state is in the shared store.
var errOwnedElsewhere = errors.New("ebbtable: the node id's tablets are not taken over yet")

// checkFresh sets c.fresh (an empty data directory, with failover, whose
// node id has a previous engine's catalog or log in the shared store) and refuses an empty data directory whose node
// id still owns tablets the failover state of its previous engine holds.
// It runs before the engine opens.
func (c *clusterMember) checkFresh() error {
	p := filepath.Join(c.dataDir, clusterFreshFile)
	had, err := hasEngine(c.dataDir)
	if err != nil {
		return err
	}
	fresh := false
	if _, err := os.Stat(p); err == nil {
		fresh = true
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	} else if !had {
		if err := durable.ReplaceFile(p, []byte("started on an empty data directory\n")); err != nil {
			return err
		}
		fresh = true
	}
	if !fresh || !c.opts.Failover {
		return nil
	}
	old, err := storage.HasCommitState(c.store, c.opts.NodeID)
	if err != nil || !old {
		return err
	}
	c.fresh = true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	owned, err := clusteretcd.TablesOwnedBy(ctx, c.opts.Etcd, c.opts.Prefix, c.opts.NodeID)
	if err != nil {
		return err
	}
	if len(owned) > 0 {
		return fmt.Errorf("%w: node %s starts on an empty data directory, but the tablet directory still names it the owner of tablets of %s, "+
			"whose acknowledged writes are in its previous engine's checkpoints and commit log in the shared store: "+
			"start it with its old data directory, or wait until the other nodes took its tablets over (once its lease expired) and start it again",
			errOwnedElsewhere, c.opts.NodeID, strings.Join(owned, ", "))
	}
	return c.checkFreshKept(ctx)
}

// errKeptElsewhere: a node id started on an empty data directory is named
// by the kept directory of a deleted table whose checkpoint its previous
// engine holds.
var errKeptElsewhere = errors.New("ebbtable: a deleted table's checkpoint of the node id's previous engine is still needed")

// checkFreshKept refuses a fresh start while a table deleted and kept for
// an undelete has tablets of the node id whose checkpoint is in the
// previous engine's catalog: the new engine's first round would drop that
// checkpoint, and an undelete would then give the node those tablets
// empty. (The release of a dead node waits on the same condition:
// clusterfailrelease.go.) Undeleted while the node is down, the table's
// tablets are taken over from the checkpoint by the others; else the kept
// directory expires with the table's undelete retention.
func (c *clusterMember) checkFreshKept(ctx context.Context) error {
	kept, err := clusteretcd.KeptTablesOwnedBy(ctx, c.opts.Etcd, c.opts.Prefix, c.opts.NodeID)
	if err != nil || len(kept) == 0 {
		return err
	}
	cat, ok, err := storage.ReadCatalog(c.store, c.opts.NodeID)
	if err != nil || !ok {
		return err
	}
	var need []string
	for _, e := range cat.Entries {
		if id, ok := kept[e.Table]; ok && id == e.TableID && !slices.Contains(need, e.Table) {
			need = append(need, e.Table)
		}
	}
	if len(need) == 0 {
		return nil
	}
	sort.Strings(need)
	return fmt.Errorf("%w: node %s starts on an empty data directory, but %s, deleted and kept for an undelete, would give it tablets "+
		"whose only copy is a checkpoint of its previous engine in the shared store (its first round here would drop it): "+
		"start it with its old data directory; or undelete the table while it is down (the other nodes then take those tablets over from the checkpoint) "+
		"and start it again; or wait until the table's undelete retention has passed",
		errKeptElsewhere, c.opts.NodeID, strings.Join(need, ", "))
}

// releasePrevious, once a fresh data directory's node joined (its old
// process is not live: the join would have been refused), releases the
// shared-object references of the node id's previous engine, which is
// gone; before recordCreator replaces its recorded creator id.
func (c *clusterMember) releasePrevious(ctx context.Context) error {
	if !c.fresh || c.fail == nil {
		return nil
	}
	if c.s.knobs().skipReleasePrevious.get() { // tests
		return nil
	}
	ids, err := c.creatorsOf(ctx, c.opts.NodeID)
	if err != nil {
		return err
	}
	var prev []uint64
	for _, id := range ids {
		if id != c.creator {
			prev = append(prev, id)
		}
	}
	refs, objects, err := storage.ReleaseSharedRefs(c.store, prev...)
	if err != nil {
		return err
	}
	if err := c.m.ForgetCreatorIDs(ctx, c.opts.NodeID, prev); err != nil {
		return err
	}
	if refs > 0 {
		c.s.log.Info("released the shared objects of this node id's previous data directory", "creator", prev,
			"ref_markers", refs, "objects_deleted", objects)
	}
	return nil
}

// startedFresh: the first start on the data directory is done.
func (c *clusterMember) startedFresh() error {
	if err := os.Remove(filepath.Join(c.dataDir, clusterFreshFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	c.fresh = false
	return nil
}
