package table

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/storage"
)

// The GC agenda (storage key space 0x04: table · due · row) lists the rows
// the collector must judge and from when. A write puts its row there in the
// write's own batch, so the entry is exactly as durable as the cells:
//
//   - a cell written to a family whose rule counts versions: due at once
//     (the write's time), since the new version may push older ones out;
//   - a cell written already old, within AgendaSlack of its family's max age
//     or past it: due at once;
//   - a cell with a native expiry: due at the expiry.
//
// Nothing else makes a cell collectable but time passing a max age, which
// the collector finds through the timestamp block property. Deletions only
// ever make cells less collectable, so they mark nothing. An entry is never
// due before the write that made it, nor more than agendaReuse before a later
// write that relied on it instead of adding one (agendamarks.go), which
// lets a whole sweep settle every entry due more than AgendaSlack +
// agendaReuse before it began.

// AgendaSlack bounds how long a write may take between reading the clock and
// committing; the collector's windows overlap by it (docs/garbage-collection.md).
const AgendaSlack = 5 * time.Second

// gcGens holds, per table id, a counter bumped whenever cells arrive that
// no agenda entry announces (an import from a peer): the collector sweeps a
// table whole when it changed. all counts the bumps of every table (they
// forget the agenda marks, agendamarks.go).
type gcGens struct {
	m   sync.Map // uint64 → *atomic.Uint64
	all atomic.Uint64
}

func (g *gcGens) bump(id uint64) {
	v, _ := g.m.LoadOrStore(id, new(atomic.Uint64))
	v.(*atomic.Uint64).Add(1)
	g.all.Add(1)
}

func (g *gcGens) get(id uint64) uint64 {
	if v, ok := g.m.Load(id); ok {
		return v.(*atomic.Uint64).Load()
	}
	return 0
}

// GCGeneration is a number that changes whenever table id received cells
// without agenda entries; the collector sweeps the table whole then.
func (e *Engine) GCGeneration(id uint64) uint64 { return e.gcGen.get(id) }

// markAgenda puts row on the agenda, in b, for a cell just written to family
// fam with timestamp ts and native expiry exp (0: none).
func (e *Engine) markAgenda(b *pebble.Batch, m *Meta, fam uint32, row []byte, ts, exp int64) error {
	now, due, err := e.agendaExpiry(b, m, fam, row, ts, exp)
	if err != nil || !due {
		return err
	}
	return b.Set(storage.AgendaKey(m.ID, now, row), nil, nil)
}

// agendaExpiry puts, in b, the agenda entry of a cell's native expiry exp
// (0: none), and reports whether the cell's family rule also wants the row
// on the agenda now (a versions rule, or a cell already old enough), with
// the time now the entry would be due.
func (e *Engine) agendaExpiry(b *pebble.Batch, m *Meta, fam uint32, row []byte, ts, exp int64) (now int64, due bool, err error) {
	if exp != 0 {
		if err := b.Set(storage.AgendaKey(m.ID, exp, row), nil, nil); err != nil {
			return 0, false, err
		}
	}
	f, ok := m.FamilyByID(fam)
	if !ok || f.GC.IsNone() {
		return 0, false, nil
	}
	now = e.nowMicros()
	return now, f.GC.HasVersions() || agedAtWrite(f.GC, ts, now), nil
}

// agedAtWrite says whether a cell written at now with timestamp ts is
// within AgendaSlack of one of the rule's max ages, or past it: the
// collector's age windows may not reach back to it.
func agedAtWrite(r gcrule.Rule, ts, now int64) bool {
	for _, a := range RuleAges(r) {
		if ts+a.Microseconds() <= now+AgendaSlack.Microseconds() {
			return true
		}
	}
	return false
}

// RuleAges lists the distinct max ages anywhere in r, ascending: the ages at
// which time passing can change a cell's verdict.
func RuleAges(r gcrule.Rule) []time.Duration {
	var out []time.Duration
	var walk func(gcrule.Rule)
	walk = func(x gcrule.Rule) {
		if x.Kind() == gcrule.KindMaxAge && x.Age() > 0 {
			i := 0
			for i < len(out) && out[i] < x.Age() {
				i++
			}
			if i == len(out) || out[i] != x.Age() {
				out = append(out[:i], append([]time.Duration{x.Age()}, out[i:]...)...)
			}
		}
		for _, c := range x.Children() {
			walk(c)
		}
	}
	walk(r)
	return out
}

// AgendaEntry is one entry of a table's agenda.
type AgendaEntry struct {
	Due int64
	Row []byte
}

// AgendaDue calls fn, in due order, for the entries of m's agenda due before
// upTo (microseconds), until fn returns false. The row aliases memory valid
// only during the call.
func (e *Engine) AgendaDue(m *Meta, upTo int64, fn func(AgendaEntry) bool) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	return e.agendaDue(m, upTo, fn)
}

// agendaDue is AgendaDue for callers already inside enter.
func (e *Engine) agendaDue(m *Meta, upTo int64, fn func(AgendaEntry) bool) error {
	it, err := e.store.NewIter(&pebble.IterOptions{LowerBound: storage.AgendaPrefix(m.ID), UpperBound: storage.AgendaDueBound(m.ID, upTo)})
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		_, due, row, err := storage.DecodeAgendaKey(it.Key())
		if err != nil {
			it.Close()
			return err
		}
		if !fn(AgendaEntry{Due: due, Row: row}) {
			break
		}
	}
	return it.Close()
}

// AgendaCounts counts m's agenda entries due before now and after it,
// stopping at limit entries in all (counts at the limit are lower bounds).
func (e *Engine) AgendaCounts(m *Meta, now int64, limit int) (due, later int, err error) {
	n := 0
	err = e.AgendaDue(m, 1<<63-1, func(en AgendaEntry) bool {
		if en.Due < now {
			due++
		} else {
			later++
		}
		n++
		return n < limit
	})
	return due, later, err
}

// SettleAgenda deletes m's agenda entries due before before: a whole sweep
// that began at least AgendaSlack after them judged their rows. It keeps
// those due within agendaReuse of before: a later write of their row may
// have relied on them (agendamarks.go).
func (e *Engine) SettleAgenda(m *Meta, before int64) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	b := e.store.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(storage.AgendaPrefix(m.ID), storage.AgendaDueBound(m.ID, before-agendaReuse.Microseconds()), nil); err != nil {
		return err
	}
	err := e.commitUngated(b, pebble.NoSync)
	e.agendaMarks.forgetAll()
	return err
}
