package table

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/storage"
)

// RowPolicy is a table's row deletion policy, as stored in its schema: a
// row is deleted once the newest value of the column Family:Qualifier, read
// as a timestamp, is more than Days days in the past. Package rowttl owns
// its meaning (DDL, value parsing, the deletion job); the engine only keeps
// it and asks rowttl's hook whether a row is expired.
type RowPolicy struct {
	Family    string `json:"family"`
	Qualifier []byte `json:"qualifier"`
	Days      int64  `json:"days"`
	// Paused policies neither hide nor delete rows: a table restored from
	// a backup with --retention pause keeps its policy this way until
	// ResumeRowPolicy.
	Paused bool `json:"paused,omitempty"`
}

// ResumeRowPolicy un-pauses a table's row deletion policy.
func (e *Engine) ResumeRowPolicy(instance, name string) (*Meta, error) {
	return e.updateMeta(instance, name, func(m *Meta) error {
		if m.RowPolicy == nil || !m.RowPolicy.Paused {
			return fmt.Errorf("%w: table %s has no paused row deletion policy", ErrPrecondition, name)
		}
		m.RowPolicy.Paused = false
		return nil
	})
}

// PolicyChange says how SetRowPolicy changes a table's policy.
type PolicyChange int

// The policy changes: add refuses a table that has a policy, replace and
// drop refuse one that has none.
const (
	PolicyAdd PolicyChange = iota
	PolicyReplace
	PolicyDrop
)

// SetRowPolicy adds, replaces or drops a table's row deletion policy
// (p is ignored for PolicyDrop). A table has at most one policy: a second
// add, and a replace or drop where there is none, fail with
// ErrPrecondition (as Spanner's FAILED_PRECONDITION for schema changes).
func (e *Engine) SetRowPolicy(instance, name string, change PolicyChange, p RowPolicy) (*Meta, error) {
	return e.updateMeta(instance, name, func(m *Meta) error {
		switch change {
		case PolicyAdd, PolicyReplace:
			if change == PolicyAdd && m.RowPolicy != nil {
				return fmt.Errorf("%w: table %s already has a row deletion policy; replace it or drop it first", ErrPrecondition, name)
			}
			if change == PolicyReplace && m.RowPolicy == nil {
				return fmt.Errorf("%w: table %s has no row deletion policy to replace; add one", ErrPrecondition, name)
			}
			if _, ok := m.Family(p.Family); !ok {
				return fmt.Errorf("%w: %q in table %s (the row deletion policy's column)", ErrFamilyNotFound, p.Family, name)
			}
			if p.Days < 0 {
				return fmt.Errorf("%w: row deletion policy interval must not be negative", ErrInvalid)
			}
			p.Qualifier = bytes.Clone(p.Qualifier)
			m.RowPolicy = &p
		case PolicyDrop:
			if m.RowPolicy == nil {
				return fmt.Errorf("%w: table %s has no row deletion policy to drop", ErrPrecondition, name)
			}
			m.RowPolicy = nil
		default:
			return fmt.Errorf("%w: unknown policy change %d", ErrInvalid, change)
		}
		return nil
	})
}

// SetInterleaveSeparator declares that rows whose key is another row's key
// followed by sep are that row's interleaved children, deleted with it by
// the row deletion job. An empty sep removes the declaration.
func (e *Engine) SetInterleaveSeparator(instance, name string, sep []byte) (*Meta, error) {
	return e.updateMeta(instance, name, func(m *Meta) error {
		m.InterleaveSeparator = nil
		if len(sep) > 0 {
			m.InterleaveSeparator = bytes.Clone(sep)
		}
		return nil
	})
}

// RowExpiry tells whether a row of a table with a row deletion policy is
// expired at now (micros). row holds the cells readers may see otherwise.
// Package rowttl provides it.
type RowExpiry func(m *Meta, row cell.Row, now int64) bool

// SetRowExpiry installs the hook that hides expired rows from readers in
// the HideEligible mode. Tables without a policy never call it.
func (e *Engine) SetRowExpiry(f RowExpiry) { e.rowExpiry.Store(&f) }

// rowHidden reports whether the row policy hides row from readers: it is
// expired, or it is an interleaved child of an expired row (the job will
// delete them together). Tables without a policy cost one nil check.
func (e *Engine) rowHidden(m *Meta, row cell.Row, now int64) bool {
	if len(row.Cells) == 0 || !e.rowPolicyApplies(m) {
		return false
	}
	f := e.rowExpiry.Load()
	if (*f)(m, row, now) {
		return true
	}
	sep := m.InterleaveSeparator
	if len(sep) == 0 {
		return false
	}
	// Each occurrence of the separator ends an ancestor's key.
	for i := bytes.Index(row.Key, sep); i > 0; {
		parent, err := e.peekRow(m, row.Key[:i], now)
		if err == nil && len(parent.Cells) > 0 && (*f)(m, parent, now) {
			return true
		}
		j := bytes.Index(row.Key[i+len(sep):], sep)
		if j < 0 {
			break
		}
		i += len(sep) + j
	}
	return false
}

// rowPolicyApplies reports whether rowHidden may hide rows of m.
func (e *Engine) rowPolicyApplies(m *Meta) bool {
	return m.RowPolicy != nil && !m.RowPolicy.Paused && e.vis == HideEligible && e.rowExpiry.Load() != nil
}

// peekRow reads one row's visible cells from the latest state, without a
// lock.
func (e *Engine) peekRow(m *Meta, key []byte, now int64) (cell.Row, error) {
	prefix := storage.RowPrefix(m.ID, key)
	it, err := e.store.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: storage.PrefixEnd(prefix)})
	if err != nil {
		return cell.Row{}, err
	}
	defer it.Close()
	s := scanner{e: e, m: m, it: it, now: now}
	out := cell.Row{Key: key}
	err = s.scanForward(func(r cell.Row) error {
		out.Cells = r.Cells
		return nil
	})
	return out, err
}

type rowExpiryHook = atomic.Pointer[RowExpiry]

// DeletedRow is a row the row deletion job deleted: its key, the cells it
// had (as a reader in this mode would have seen them) and, for an
// interleaved child deleted with its parent, the parent's key.
type DeletedRow struct {
	Key    []byte
	Cells  []cell.Cell
	Parent []byte
}

// DeleteRows deletes, in one synced Pebble batch, each row of keys that
// still(row) accepts when re-read under its row lock, together with its
// interleaved children (rows whose key starts with the row's key and the
// table's separator). Before the batch commits, before (if not nil) is
// called with the rows it deletes; an error from before aborts the batch. It returns the
// rows deleted. Children are not locked: a child written while its parent
// is deleted may be deleted with it.
func (e *Engine) DeleteRows(ctx context.Context, m *Meta, keys [][]byte, still func(cell.Row) bool, before func(deleted []DeletedRow) error) ([]DeletedRow, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	if cur, ok := e.TableByID(m.ID); !ok || cur.RowPolicy == nil || cur.RowPolicy.Paused {
		return nil, nil // the table or its policy went away
	}
	unlock := e.LockRows(m.ID, keys)
	defer unlock()
	it, err := e.store.NewIter(nil)
	if err != nil {
		return nil, err
	}
	defer it.Close()
	s := scanner{e: e, m: m, it: it, now: e.nowMicros()}
	readRange := func(lo, hi []byte, fn func(cell.Row)) error {
		it.SetBounds(lo, hi)
		return s.scanForward(func(r cell.Row) error {
			fn(r)
			return nil
		})
	}
	b := e.store.NewBatch()
	defer b.Close()
	// Point deletions, not range deletions: many range tombstones in the
	// memtable would slow every foreground iterator down.
	deleteIn := func(lo, hi []byte) error {
		it.SetBounds(lo, hi)
		for valid := it.First(); valid; valid = it.Next() {
			if err := b.Delete(it.Key(), nil); err != nil {
				return err
			}
		}
		return it.Error()
	}
	var deleted []DeletedRow
	var parents [][]byte // child-key prefixes already deleted in this batch
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if slices.ContainsFunc(parents, func(p []byte) bool { return bytes.HasPrefix(k, p) }) {
			continue // goes with its parent
		}
		prefix := storage.RowPrefix(m.ID, k)
		var row *cell.Row
		if err := readRange(prefix, storage.PrefixEnd(prefix), func(r cell.Row) { row = &r }); err != nil {
			return nil, err
		}
		if row == nil || !still(*row) {
			continue
		}
		if err := deleteIn(prefix, storage.PrefixEnd(prefix)); err != nil {
			return nil, err
		}
		deleted = append(deleted, DeletedRow{Key: bytes.Clone(k), Cells: row.Cells})
		if len(m.InterleaveSeparator) == 0 {
			continue
		}
		child := append(bytes.Clone(k), m.InterleaveSeparator...)
		parents = append(parents, child)
		lo, hi := storage.RowPrefixScanStart(m.ID, child), storage.RowPrefixScanEnd(m.ID, child)
		if err := readRange(lo, hi, func(r cell.Row) {
			deleted = append(deleted, DeletedRow{Key: r.Key, Cells: r.Cells, Parent: bytes.Clone(k)})
		}); err != nil {
			return nil, err
		}
		if err := deleteIn(lo, hi); err != nil {
			return nil, err
		}
	}
	if len(deleted) == 0 {
		return nil, nil
	}
	if before != nil {
		if err := before(deleted); err != nil {
			return nil, err
		}
	}
	// The deletions are audited in the table's change stream, in this same
	// batch: system transactions tagged RowDeletionPolicy, as the source
	// system records them.
	var recs []changestream.Record
	cur, _ := e.TableByID(m.ID)
	if cur != nil && e.streaming(m.ID) {
		recs = rowPolicyRecords(deleted)
	} else {
		cur = m
	}
	logged, err := e.logViewDeleted(b, m, deleted) // viewlog.go
	defer logged()
	if err != nil {
		return nil, err
	}
	if err := e.commitRecorded(b, cur, nil, recs, pebble.Sync, true); err != nil {
		return nil, err
	}
	return deleted, nil
}

// rowPolicyRecords describes deleted rows as change-stream records: one
// DeleteFromRow per row, system transactions tagged RowDeletionPolicy.
func rowPolicyRecords(deleted []DeletedRow) []changestream.Record {
	recs := make([]changestream.Record, 0, len(deleted))
	for _, d := range deleted {
		recs = append(recs, changestream.Record{
			Type:           changestream.GarbageCollection,
			Reason:         changestream.ReasonRowDeletionPolicy,
			TransactionTag: changestream.TagRowDeletionPolicy,
			IsSystem:       true,
			RowKey:         bytes.Clone(d.Key),
			Mods:           []changestream.Mod{{Kind: changestream.DeleteFromRow}},
		})
	}
	return recs
}
