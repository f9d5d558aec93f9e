package clusteretcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ebbtable/ebbtable/cluster"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Operation records: a long-running operation that must outlive the node
// that started it (a cluster restore) keeps its state in etcd, one key per
// operation (ops/NAME, NAME the operation's resource name), so any node
// answers GetOperation for it and another node can finish or give it up
// when its coordinator dies. The value is opaque here (package server
// encodes it). Changes compare the key's revision, so of two nodes racing
// to move an operation on, one wins.

// ErrDirectoryGone: an entry guarded by DirOp.IfTableID found the table's
// directory gone, or holding another table id.
var ErrDirectoryGone = errors.New("ebbtable: the table's directory is gone or holds another table")

func (m *Member) opKey(name string) string { return m.key("ops", name) }

// GetOpRecord reads one operation record (ErrRecordNotFound).
func (m *Member) GetOpRecord(ctx context.Context, name string) (BackupRecord, error) {
	return m.getRecord(ctx, m.opKey(name), name)
}

// ListOpRecords reads every operation record, in name order.
func (m *Member) ListOpRecords(ctx context.Context) ([]BackupRecord, error) {
	return m.listRecords(ctx, m.opKey(""), "")
}

// ListOpRecordsUnder reads the operation records whose names start with
// prefix, in name order.
func (m *Member) ListOpRecordsUnder(ctx context.Context, prefix string) ([]BackupRecord, error) {
	return m.listRecords(ctx, m.opKey(""), prefix)
}

// UpdateOpRecord replaces a record read at revision rev (ErrRecordChanged
// if it changed or went since) and returns the new revision.
func (m *Member) UpdateOpRecord(ctx context.Context, name string, value []byte, rev int64) (int64, error) {
	return m.updateRecord(ctx, m.opKey(name), name, value, rev)
}

// DeleteOpRecord removes a record read at revision rev (any revision if
// rev is 0; ErrRecordChanged if it changed or went since).
func (m *Member) DeleteOpRecord(ctx context.Context, name string, rev int64) error {
	k := m.opKey(name)
	cmp := clientv3.Compare(clientv3.ModRevision(k), "=", rev)
	if rev == 0 {
		cmp = clientv3.Compare(clientv3.CreateRevision(k), ">", 0)
	}
	resp, err := m.cli.Txn(ctx).If(cmp).Then(clientv3.OpDelete(k)).Commit()
	if err != nil {
		return fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: %s", ErrRecordChanged, name)
	}
	return nil
}

// guardTableID returns the comparison that the table's directory is the
// one read now and holds id (ErrDirectoryGone if it does not).
func (m *Member) guardTableID(ctx context.Context, table string, id uint64) (clientv3.Cmp, error) {
	dk := m.dirKey(table)
	g, err := m.cli.Get(ctx, dk)
	if err != nil {
		return clientv3.Cmp{}, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if len(g.Kvs) == 0 {
		return clientv3.Cmp{}, fmt.Errorf("%w: %s", ErrDirectoryGone, table)
	}
	d, err := decodeDirectory(g.Kvs[0].Value)
	if err != nil {
		return clientv3.Cmp{}, err
	}
	if d.TableID != id {
		return clientv3.Cmp{}, fmt.Errorf("%w: %s holds table id %d, not %d", ErrDirectoryGone, table, d.TableID, id)
	}
	return clientv3.Compare(clientv3.ModRevision(dk), "=", g.Kvs[0].ModRevision), nil
}

func decodeDirectory(b []byte) (cluster.Directory, error) {
	var d cluster.Directory
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("ebbtable: undecodable tablet directory: %w", err)
	}
	return d, nil
}

// A backup's operation (CreateBackup, CopyBackup) is kept with the
// backup's record: both are created in one transaction, and the backup's
// outcome (its record READY, or gone) is written in the transaction that
// ends its operation, so the two never disagree, whichever node (the
// coordinator, or a sweep that found it gone) ends it.

// CreateBackupWithOp adds a backup's record and its operation's record in
// one transaction, if neither exists (ErrRecordExists), and returns their
// revision.
func (m *Member) CreateBackupWithOp(ctx context.Context, name string, value []byte, op string, opValue []byte) (int64, error) {
	k, ok := m.backupKey(name), m.opKey(op)
	resp, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0), clientv3.Compare(clientv3.CreateRevision(ok), "=", 0)).
		Then(clientv3.OpPut(k, string(value)), clientv3.OpPut(ok, string(opValue))).Commit()
	if err != nil {
		return 0, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("%w: %s", ErrRecordExists, name)
	}
	return resp.Header.Revision, nil
}

// EndBackupOp replaces operation record op, read at revision opRev, by
// opValue and, in the same transaction, the backup's record read at
// revision rev by value (deleted, with its IAM policy, if value is nil;
// left alone if rev is 0). ErrRecordChanged if either changed since.
func (m *Member) EndBackupOp(ctx context.Context, name string, value []byte, rev int64, op string, opValue []byte, opRev int64) error {
	ok := m.opKey(op)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(ok), "=", opRev)}
	ops := []clientv3.Op{clientv3.OpPut(ok, string(opValue))}
	if rev != 0 {
		k := m.backupKey(name)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", rev))
		if value == nil {
			ops = append(ops, clientv3.OpDelete(k), clientv3.OpDelete(m.iamKey(name)))
		} else {
			ops = append(ops, clientv3.OpPut(k, string(value)))
		}
	}
	resp, err := m.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: %s", ErrRecordChanged, op)
	}
	if rev != 0 && value == nil {
		m.ownIAMWrite(name, nil, resp.Header.Revision, true)
	}
	return nil
}
