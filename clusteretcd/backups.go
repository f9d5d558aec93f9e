package clusteretcd

import (
	"context"
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Backup records: a cluster's backups are listed in etcd, one key per
// backup (backups/NAME, NAME the backup's resource name), so every node
// sees the same backups; their files are in the shared object store. The
// value is opaque here (package backup encodes it). Each change compares
// the key's revision, so two nodes never both create, or both change, one
// backup.

// Errors of backup records.
var (
	ErrRecordExists   = errors.New("ebbtable: backup record already exists")
	ErrRecordNotFound = errors.New("ebbtable: backup record not found")
	ErrRecordChanged  = errors.New("ebbtable: backup record changed meanwhile")
)

// BackupRecord is one record with the revision it was read at.
type BackupRecord struct {
	Name     string
	Value    []byte
	Revision int64 // the key's mod revision
}

func (m *Member) backupKey(name string) string { return m.key("backups", name) }

// CreateBackupRecord adds a record if none has that name (ErrRecordExists).
func (m *Member) CreateBackupRecord(ctx context.Context, name string, value []byte) (int64, error) {
	k := m.backupKey(name)
	resp, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(clientv3.OpPut(k, string(value))).Commit()
	if err != nil {
		return 0, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("%w: %s", ErrRecordExists, name)
	}
	return resp.Header.Revision, nil
}

// GetBackupRecord reads one record (ErrRecordNotFound).
func (m *Member) GetBackupRecord(ctx context.Context, name string) (BackupRecord, error) {
	return m.getRecord(ctx, m.backupKey(name), name)
}

// getRecord reads the record name at key k (ErrRecordNotFound).
func (m *Member) getRecord(ctx context.Context, k, name string) (BackupRecord, error) {
	resp, err := m.cli.Get(ctx, k)
	if err != nil {
		return BackupRecord{}, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return BackupRecord{}, fmt.Errorf("%w: %s", ErrRecordNotFound, name)
	}
	kv := resp.Kvs[0]
	return BackupRecord{Name: name, Value: kv.Value, Revision: kv.ModRevision}, nil
}

// ListBackupRecords reads the records whose names start with prefix, in
// name order.
func (m *Member) ListBackupRecords(ctx context.Context, prefix string) ([]BackupRecord, error) {
	return m.listRecords(ctx, m.backupKey(""), prefix)
}

// listRecords reads the records under base whose names start with
// prefix, in name order (backups and restore operations).
func (m *Member) listRecords(ctx context.Context, base, prefix string) ([]BackupRecord, error) {
	resp, err := m.cli.Get(ctx, base+prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	out := make([]BackupRecord, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, BackupRecord{Name: strings.TrimPrefix(string(kv.Key), base), Value: kv.Value, Revision: kv.ModRevision})
	}
	return out, nil
}

// UpdateBackupRecord replaces a record read at revision rev
// (ErrRecordChanged if it changed or went since) and returns the new
// revision.
func (m *Member) UpdateBackupRecord(ctx context.Context, name string, value []byte, rev int64) (int64, error) {
	return m.updateRecord(ctx, m.backupKey(name), name, value, rev)
}

// updateRecord replaces key k, record name, if its revision is still rev.
func (m *Member) updateRecord(ctx context.Context, k, name string, value []byte, rev int64) (int64, error) {
	resp, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).Then(clientv3.OpPut(k, string(value))).Commit()
	if err != nil {
		return 0, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("%w: %s", ErrRecordChanged, name)
	}
	return resp.Header.Revision, nil
}

// DeleteBackupRecord removes a record read at revision rev
// (ErrRecordChanged if it changed or went since), and the backup's IAM
// policy (iam.go) in the same transaction.
func (m *Member) DeleteBackupRecord(ctx context.Context, name string, rev int64) error {
	k := m.backupKey(name)
	resp, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).Then(clientv3.OpDelete(k), clientv3.OpDelete(m.iamKey(name))).Commit()
	if err != nil {
		return fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: %s", ErrRecordChanged, name)
	}
	m.ownIAMWrite(name, nil, resp.Header.Revision, true)
	return nil
}
