package rowttl

import (
	"github.com/ebbtable/ebbtable/table"
)

// The change-stream identity of the job's deletions, as the source system
// tags them.
const (
	TransactionTag      = "RowDeletionPolicy"
	IsSystemTransaction = true
)

// Deletion is one batch of the row deletion job: one atomic transaction
// with one commit timestamp.
type Deletion struct {
	Instance string
	Table    string
	TableID  uint64
	// CommitMicros is the batch's commit timestamp (the injected clock,
	// microseconds), the same for every row of the batch.
	CommitMicros int64
	// TransactionTag is always "RowDeletionPolicy" and
	// IsSystemTransaction always true.
	TransactionTag      string
	IsSystemTransaction bool
	// Rows are the deleted rows in key order: each expired row, then the
	// interleaved children deleted with it (Parent set).
	Rows []table.DeletedRow
}

// Auditor is the one hook every deletion of the job goes through. It is
// called once per batch, before the batch commits, with the deletions.
// An error aborts the batch (the job then retries with smaller batches).
type Auditor interface {
	RowsDeleted(d Deletion) error
}

// NoAudit is the default Auditor: it records nothing.
type NoAudit struct{}

// RowsDeleted does nothing.
func (NoAudit) RowsDeleted(Deletion) error { return nil }

// AuditFunc adapts a function to Auditor.
type AuditFunc func(d Deletion) error

// RowsDeleted calls f.
func (f AuditFunc) RowsDeleted(d Deletion) error { return f(d) }
