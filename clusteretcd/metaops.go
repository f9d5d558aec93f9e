package clusteretcd

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// CreateOpRecord adds an operation record (ops.go) if none has that name
// (ErrRecordExists): an operation that finished when it was started, kept
// so that every node answers GetOperation for it.
func (m *Member) CreateOpRecord(ctx context.Context, name string, value []byte) error {
	k := m.opKey(name)
	resp, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(clientv3.OpPut(k, string(value))).Commit()
	if err != nil {
		return fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: %s", ErrRecordExists, name)
	}
	return nil
}
