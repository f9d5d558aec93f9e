package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	tablets "github.com/ebbtable/ebbtable/cluster"
	"github.com/ebbtable/ebbtable/storage"
)

// Releasing a dead node's shared objects (docs/scale-out.md, "Automatic
// failover"): once every tablet a dead node owned was taken over, and no
// table it holds a checkpoint of may still come back by an undelete, one
// of the nodes that took its tablets over writes a marker saying the node
// was given up, deletes its catalogs, checkpoints and commit log, and
// drops its reference markers on shared SSTables, deleting the objects no
// other node references (the take-overs' ingests added their own markers
// to what they use). The node's old data directory is refused from then
// on: its MANIFEST names SSTables that may be gone.

// DefaultReleaseDeadAfter is how long a dead node whose tablets were all
// taken over may come back with its data directory before its shared
// objects are released.
const DefaultReleaseDeadAfter = time.Hour

// errNotYet: the dead node cannot be released yet (a table it has a
// checkpoint of is deleted and may be undeleted).
var errNotYet = errors.New("ebbtable: not yet")

// releaseDead releases node dead's objects in the shared store (see
// above); dirs are the live directories, none of which names dead.
func (f *failover) releaseDead(ctx context.Context, dead string, dirs []tablets.Directory) error {
	return f.c.releaseNode(ctx, dead, dirs)
}

// releaseNode is releaseDead, also used for a node that left the cluster
// cleanly (clustercreatorleave.go).
func (c *clusterMember) releaseNode(ctx context.Context, dead string, dirs []tablets.Directory) error {
	cat, ok, err := storage.ReadCatalog(c.store, dead)
	if err != nil {
		return err
	}
	// The kept directories of deleted tables that name dead but can no
	// longer be undeleted here: removed in one etcd transaction before
	// anything is released, so an undelete racing with this release
	// either lands first (the transaction fails: not yet) or finds no
	// table to undelete (its kept directory is gone).
	giveUp := map[string]int64{}
	if ok {
		live := map[string]uint64{}
		for _, d := range dirs {
			live[d.Table] = d.TableID
		}
		for _, e := range cat.Entries {
			if id, ok := live[e.Table]; ok && id == e.TableID {
				continue // taken over (dead owns nothing in dirs)
			}
			kd, krev, kept, err := c.m.KeptDirectoryAt(ctx, e.Table)
			if err != nil {
				return err
			}
			if h := c.s.knobs().releaseKeptRead.get(); h != nil && kept { // tests
				h(dead, e.Table)
			}
			if !kept || kd.TableID != e.TableID || !ownsAny([]tablets.Directory{kd}, dead) {
				// dirs may predate an undelete that moved the kept
				// directory back: the live one, read after the kept one,
				// tells (then it is taken over from this checkpoint).
				d, ok, err := c.m.ReadDirectory(ctx, e.Table)
				if err != nil {
					return err
				}
				if ok && d.TableID == e.TableID && ownsAny([]tablets.Directory{d}, dead) {
					return errNotYet
				}
				continue
			}
			// Undeletable while the nodes keep the deleted table (this
			// one's copy stands for all: they purge it alike).
			if ref, err := parseTable(e.Table); err == nil {
				if id, ok := c.s.engine.DeletedTableID(ref.instance, ref.table); ok && id == e.TableID {
					return errNotYet // an undelete would need this checkpoint
				}
			}
			// Purged here (so on every node), or undeleted since the
			// kept directory was read: the transaction below tells.
			giveUp[e.Table] = krev
		}
	}
	if len(giveUp) > 0 {
		dropped, err := c.m.DropKeptAt(ctx, giveUp)
		if err != nil {
			return err
		}
		if !dropped {
			return errNotYet // undeleted meanwhile: taken over from the checkpoint
		}
		c.s.log.Info("dropped the kept directories of deleted tables of a node being released (they can no longer be undeleted)", "node", dead, "tables", len(giveUp))
	}
	if err := storage.PutObject(c.store, storage.ReleasedMarker(dead), []byte(c.opts.NodeID+"\n")); err != nil {
		return err
	}
	if _, live := c.m.Node(dead); live {
		// Back just now: it keeps its objects; its marker goes.
		return c.store.Delete(storage.ReleasedMarker(dead))
	}
	if err := storage.DeleteCatalogs(c.store, dead); err != nil {
		return err
	}
	if err := storage.DeleteCheckpoints(c.store, dead, nil); err != nil {
		return err
	}
	if err := storage.DeleteCommitLog(c.store, dead); err != nil {
		return err
	}
	// Every creator id the node id ran with: the references of an
	// earlier data directory of it that were never released go too.
	creators, err := c.creatorsOf(ctx, dead) // clustercreator.go
	if err != nil {
		return err
	}
	refs, objects, err := storage.ReleaseSharedRefs(c.store, creators...)
	if err != nil {
		return err
	}
	if err := c.m.ForgetCreatorIDs(ctx, dead, creators); err != nil {
		return err
	}
	c.s.log.Info("released the shared objects of a node whose tablets were all taken over", "node", dead,
		"creators", creators, "ref_markers", refs, "objects_deleted", objects)
	return nil
}

// checkReleased refuses to reopen the data directory of a node that was
// given up and released (its shared SSTables may be gone); a new data
// directory clears the marker (and takes a new creator id:
// clustercreator.go).
func (c *clusterMember) checkReleased() error {
	if c.store == nil {
		return nil
	}
	name := storage.ReleasedMarker(c.opts.NodeID)
	if _, err := storage.GetObject(context.Background(), c.store, name); err != nil {
		return nil // no marker (or unreadable: Pebble's own reads will tell)
	}
	if _, err := os.Stat(filepath.Join(c.dataDir, clusterLeaseFile)); err == nil {
		return fmt.Errorf("%w: node %s died and its tablets were taken over by the others, which released its shared SSTables (%s in the shared store): "+
			"its data directory %s must not be used again; start it with an empty data directory (it gets a new creator id)", errInvalid, c.opts.NodeID, name, c.dataDir)
	}
	if err := c.store.Delete(name); err != nil && !c.store.IsNotExistError(err) {
		return err
	}
	return nil
}
