package server

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/ebbtable/ebbtable/backup"
	"github.com/ebbtable/ebbtable/clusteretcd"
)

// A backup's record carries its maker (NODE/TOKEN) while it is CREATING,
// so a backup whose maker is gone is given up from the record alone, as
// sweepBackupOp gives up one with an operation: an automated backup (it
// has no operation), or one whose operation the client deleted while it
// ran. sweepOrphanBackup (from sweepBackups, every node's backup expiry
// loop) removes the record (and its IAM policy) with a compare on its
// revision, so of two nodes racing one wins, then the files written so
// far. The name is free at once, and with the record gone the automated
// backup schedule (autobackup.go) takes the table's backup at its next
// check, as the dead one no longer counts as its newest.

// sweepOrphanBackup gives up a CREATING backup record r (mf, made by
// maker) if its maker is gone and no running operation of it is left for
// sweepBackupOp. It reports whether it removed it.
func (c *clusterMember) sweepOrphanBackup(ctx context.Context, r clusteretcd.BackupRecord, mf *backup.Manifest, maker string) bool {
	if maker == "" || c.backupRunning(maker) {
		return false
	}
	if _, token, ok := strings.Cut(maker, "/"); ok {
		// A backup with its operation: the operation's sweep ends both
		// in one transaction (and fails the client's operation).
		rec, err := c.m.GetOpRecord(ctx, r.Name+backupOpMark+token)
		switch {
		case err == nil:
			var op restoreOp
			if json.Unmarshal(rec.Value, &op) == nil && op.State == opRunning && op.Maker == maker {
				return false
			}
		case !errors.Is(err, clusteretcd.ErrRecordNotFound):
			return false
		}
	}
	if err := c.m.DeleteBackupRecord(ctx, r.Name, r.Revision); err != nil {
		return false // changed or deleted by another node meanwhile
	}
	c.removeObjects(mf.Objects)
	if err := c.s.forgetIAM(mf.Name); err != nil {
		c.s.log.Warn("forget a given-up backup's IAM policy", "backup", mf.Name, "err", err)
	}
	c.forgetBackupTotals()
	c.s.log.Info("gave up a backup whose maker is gone", "backup", mf.Name, "maker", maker, "automated", mf.Automated)
	return true
}
