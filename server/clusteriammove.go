package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/ebbtable/ebbtable/clusteretcd"
	"github.com/ebbtable/ebbtable/internal/durable"
)

// clusterIAMMovedFile marks a data directory whose IAM policies were
// copied into etcd (moveLocalIAM): the copy runs once per directory.
const clusterIAMMovedFile = ".cluster-iam-moved"

// moveLocalIAM copies the IAM policies this node kept in its metadata —
// set before cluster mode kept every policy in etcd, or while the
// directory served alone — into etcd, where cluster mode reads them
// (clusteriam.go). Once per data directory (clusterIAMMovedFile), run at
// start before the node applies the schema log, and idempotent: a policy
// etcd already holds for the name wins (another node's copy, or one set
// since); the node's own copy is left in its metadata, unread. A table's
// or an authorized view's policy is copied only if the cluster's table of
// that name is the one the node held it for (the same table id): a table
// made again since starts without it, as it would have. Backups' policies
// are in etcd already (cluster mode kept them there first); a backup in a
// directory's own metadata is not a cluster backup.
func (c *clusterMember) moveLocalIAM(ctx context.Context) error {
	marker := filepath.Join(c.s.opts.DataDir, clusterIAMMovedFile)
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	type local struct {
		inst, rest string
		v          []byte
	}
	var all []local
	if err := c.s.engine.InstanceMeta(kindIAM, "", func(inst, rest string, v []byte) error {
		all = append(all, local{inst, rest, append([]byte(nil), v...)})
		return nil
	}); err != nil {
		return err
	}
	var copied, had, skipped int
	for _, p := range all {
		name := strings.TrimSuffix(p.inst+"/"+p.rest, "/")
		if why := c.movableIAM(p.inst, p.rest); why != "" {
			skipped++
			c.s.log.Info("IAM policy in this node's metadata not copied to etcd", "resource", name, "why", why)
			continue
		}
		err := c.m.PutIAMPolicy(ctx, name, p.v, 0) // only if etcd has none
		switch {
		case errors.Is(err, clusteretcd.ErrRecordChanged):
			had++
			c.s.log.Info("IAM policy in this node's metadata not copied: etcd holds one for the resource", "resource", name)
		case err != nil:
			return err
		default:
			copied++
			c.s.log.Info("IAM policy copied from this node's metadata to etcd", "resource", name)
		}
	}
	if len(all) > 0 {
		c.s.log.Info("IAM policies of this node's metadata moved to etcd (once per data directory)", "copied", copied, "etcd_had", had, "skipped", skipped)
	}
	return durable.ReplaceFile(marker, []byte("1\n"))
}

// movableIAM says why inst's resource rest's local policy must not be
// copied to etcd ("" if it may).
func (c *clusterMember) movableIAM(inst, rest string) string {
	if rest == "" {
		return ""
	}
	if strings.Contains(rest, "/backups/") {
		return "a backup of this node's own metadata, not a cluster backup"
	}
	tbl, ok := strings.CutPrefix(rest, "tables/")
	if !ok {
		return "not an instance, table or authorized view"
	}
	tbl, _, _ = strings.Cut(tbl, "/")
	m, err := c.s.engine.Table(inst, tbl)
	if err != nil {
		return "this node has no table " + tbl
	}
	d, ok := c.m.Directory(inst + "/tables/" + tbl)
	if !ok || d.TableID != m.ID {
		return "the cluster's table " + tbl + " is not the one the policy was set on (deleted, or made again since)"
	}
	return ""
}
