package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ebbtable/ebbtable/clusteretcd"
	"github.com/ebbtable/ebbtable/internal/durable"
)

// The shared-storage creator id of a node's engine (docs/scale-out.md,
// "Creator ids"). Pebble names the shared objects a database writes by
// its creator id and file number, and a fresh database numbers its files
// from the start: a fresh data directory under a creator id whose objects
// are still referenced (by the nodes its tablets moved to, say) would
// write objects of the same names, replacing data other nodes read. So a
// fresh data directory takes a new creator id from a counter in etcd,
// never handed out twice, and records it in the directory; the same node
// id may then start again on an empty directory (after its disk was lost,
// or after `node drain --force`) safely. A data directory whose engine
// predates this keeps the id derived from its node id (creatorID), which
// Pebble recorded.

// clusterCreatorFile records the data directory's creator id.
const clusterCreatorFile = ".cluster-creator"

// loadCreator sets c.creator: the one the data directory recorded, the
// node id's own for an engine from before the record, or a new one.
func (c *clusterMember) loadCreator() error {
	p := filepath.Join(c.dataDir, clusterCreatorFile)
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || id == 0 {
			return fmt.Errorf("%w: %s holds %q, not a creator id", errInvalid, p, b)
		}
		c.creator = id
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	had, err := hasEngine(c.dataDir)
	if err != nil {
		return err
	}
	if had {
		c.creator = creatorID(c.opts.NodeID)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c.creator, err = clusteretcd.AllocateCreatorID(ctx, c.opts.Etcd, c.opts.Prefix); err != nil {
			return err
		}
	}
	return durable.ReplaceFile(p, []byte(strconv.FormatUint(c.creator, 10)+"\n"))
}

// hasEngine says whether dir holds a database already (a MANIFEST).
func hasEngine(dir string) (bool, error) {
	names, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	for _, n := range names {
		if strings.HasPrefix(n.Name(), "MANIFEST-") {
			return true, nil
		}
	}
	return false, nil
}

// recordCreator records in etcd the creator id this node runs with, for
// releasing its references once it is given up (clusterfailrelease.go).
func (c *clusterMember) recordCreator(ctx context.Context) error {
	if c.store == nil {
		return nil
	}
	return c.m.RecordCreatorID(ctx, c.creator)
}

// creatorsOf is every creator id node ran with (all its data
// directories' engines) and were not released: the ones it recorded, or,
// for a node from before the record, the one derived from its id.
func (c *clusterMember) creatorsOf(ctx context.Context, node string) ([]uint64, error) {
	ids, err := c.m.CreatorIDs(ctx, node)
	if err != nil || len(ids) > 0 {
		return ids, err
	}
	return []uint64{creatorID(node)}, nil
}
