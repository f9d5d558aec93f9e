package rowttl

import (
	"context"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/table"
)

// Engine is what the row-deletion job needs from the engine (a
// *table.Engine): the tables, their rows, and the locked deletion.
type Engine interface {
	Tables(instance string) []*table.Meta
	Table(instance, name string) (*table.Meta, error)
	TableByID(id uint64) (*table.Meta, bool)
	ReadRows(ctx context.Context, instance, name string, req table.ReadRequest, fn func(cell.Row) error) error
	DeleteRows(ctx context.Context, m *table.Meta, keys [][]byte, still func(cell.Row) bool, before func(deleted []table.DeletedRow) error) ([]table.DeletedRow, error)
}

// Schema is what Exec and Apply need from the engine (a *table.Engine):
// the DDL that sets row policies.
type Schema interface {
	CreateTable(instance, name string, spec table.TableSpec) (*table.Meta, error)
	SetRowPolicy(instance, name string, change table.PolicyChange, p table.RowPolicy) (*table.Meta, error)
	SetInterleaveSeparator(instance, name string, sep []byte) (*table.Meta, error)
}
