package table

import (
	"bytes"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/storage"
)

// Agenda marks. A hot row of a max-versions family is written many times a
// second, and each write put one more agenda entry in its batch: one more
// memtable key and skiplist insert for every cell, although one entry makes
// the collector judge the row with all its writes. A write made under the
// row's lock may instead rely on the entry an earlier write of the row put,
// while that entry is still there and due at most agendaReuse before the
// write's clock (markAgendaLocked). Each row-lock stripe remembers the last
// such entry its writes put (one row a stripe).
//
// Why the collector misses no write that relied on an entry:
//   - An incremental pass deletes a row's entries only visiting the row under
//     its lock, and the commit of that visit (CommitSystem) forgets the marks
//     of the rows it held: a write before the visit is one the visit judged,
//     a write after it puts its own entry.
//   - A whole sweep that began at S deletes the entries due before
//     S − AgendaSlack − agendaReuse (SettleAgenda): a write that relied on
//     one read its clock before S − AgendaSlack, so it committed before the
//     sweep began, and the sweep judged it. The settle forgets every mark.
//   - A write whose batch fails forgets the marks it set (forgetAgendaMarks).
//   - A restarted process remembers no marks and sweeps every table whole.
//   - Entries deleted any other way (a table dropped or a span moved away)
//     are of rows no longer here; cells arriving without entries (an import,
//     a span moved in) bump the table's GC generation, which forgets every
//     mark too.
//
// A relying write is never before its entry in the WAL (the entry's write
// committed first, under the same lock), so a crash keeps the entry when it
// keeps the write.

// agendaReuse is how long after its due time a row's agenda entry also
// stands for the row's later writes.
const agendaReuse = 500 * time.Millisecond

// agendaMark is a row-lock stripe's memory of an agenda entry (due now, not
// an expiry) one of its rows' writes put. Used only under the stripe's lock.
type agendaMark struct {
	set   bool
	gen   uint64 // agendaMarks.gen when set
	table uint64
	due   int64
	row   []byte
}

// agendaMarkRowMax is the longest row key a mark remembers.
const agendaMarkRowMax = 256

// agendaMarks is the engine's marks, one a row-lock stripe, and their
// generation: bumping it, or any table's GC generation, forgets them all.
type agendaMarks struct {
	gen   atomic.Uint64
	marks [rowLockStripes]agendaMark
}

// forgetAll forgets every mark.
func (a *agendaMarks) forgetAll() { a.gen.Add(1) }

// markAgendaLocked is markAgenda for a write holding row's lock (every row
// of its batch locked until the batch commits): its entry due now may be
// one an earlier write of the row put (see agendaMarks). A caller whose
// batch then fails to commit calls forgetAgendaMarks under the same lock.
func (e *Engine) markAgendaLocked(b *pebble.Batch, m *Meta, fam uint32, row []byte, ts, exp int64) error {
	now, due, err := e.agendaExpiry(b, m, fam, row, ts, exp)
	if err != nil || !due {
		return err
	}
	mk := &e.agendaMarks.marks[e.stripe(m.ID, row)]
	gen := e.agendaMarks.gen.Load() + e.gcGen.all.Load()
	if mk.set && mk.gen == gen && mk.table == m.ID && now <= mk.due+agendaReuse.Microseconds() && bytes.Equal(mk.row, row) {
		return nil
	}
	if err := b.Set(storage.AgendaKey(m.ID, now, row), nil, nil); err != nil {
		return err
	}
	if len(row) > agendaMarkRowMax {
		mk.set = false
		return nil
	}
	mk.set, mk.gen, mk.table, mk.due = true, gen, m.ID, now
	mk.row = append(mk.row[:0], row...)
	return nil
}

// forgetAgendaMarks forgets the marks of rows of table tableID, whose locks
// the caller holds: their entries may be gone (a visit deleted them) or
// never committed (a failed write).
func (e *Engine) forgetAgendaMarks(tableID uint64, rows [][]byte) {
	for _, r := range rows {
		mk := &e.agendaMarks.marks[e.stripe(tableID, r)]
		if mk.set && mk.table == tableID && bytes.Equal(mk.row, r) {
			mk.set = false
		}
	}
}
