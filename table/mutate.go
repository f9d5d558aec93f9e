package table

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/storage"
)

// Limits Bigtable enforces, enforced the same way here.
const (
	MaxRowKeyBytes       = 4 << 10
	MaxQualifierBytes    = 16 << 10
	MaxValueBytes        = 100 << 20
	MaxMutationsPerRow   = 100000
	MaxFamiliesPerTable  = 1000
	ServerTimestamp      = -1
	maxSafeTimestampDiff = cell.MaxTimestamp
)

// MutationKind names what a Mutation does.
type MutationKind int

// The mutation kinds of the Bigtable Data API.
const (
	SetCell MutationKind = iota + 1
	DeleteFromColumn
	DeleteFromFamily
	DeleteFromRow
	// AddToCell combines IntInput into an aggregate family's cell.
	AddToCell
	// MergeToCell combines Value (an 8-byte accumulator, or a sketch) into
	// an aggregate family's cell.
	MergeToCell
)

// Mutation is one change to a row.
type Mutation struct {
	Kind      MutationKind
	Family    string
	Qualifier []byte
	// Timestamp of SetCell in microseconds; ServerTimestamp means now.
	Timestamp int64
	// AutoTimestamp marks a timestamp the client library generated itself;
	// it is truncated to the millisecond instead of refused.
	AutoTimestamp bool
	Value         []byte
	// StartTS and EndTS bound DeleteFromColumn to [StartTS, EndTS); EndTS 0
	// means no upper bound.
	StartTS, EndTS int64
	// ExpireAt is a native cell expiry in microseconds (0 = none).
	ExpireAt int64
	// TTLMicros, when not zero, sets ExpireAt to the write time plus this
	// many microseconds. (Microseconds, not a time.Duration: a duration
	// overflows at 292 years, and TTLs may reach year 9999.)
	TTLMicros int64
	// IntInput is AddToCell's input.
	IntInput int64
}

// validateRowKey checks a row key against Bigtable's limits.
func validateRowKey(row []byte) error {
	if len(row) == 0 {
		return fmt.Errorf("%w: row key must not be empty", ErrInvalid)
	}
	if len(row) > MaxRowKeyBytes {
		return fmt.Errorf("%w: row key is %d bytes, the limit is %d", ErrInvalid, len(row), MaxRowKeyBytes)
	}
	return nil
}

// prepared is a mutation checked against the schema, with its family id and
// final timestamp.
type prepared struct {
	Mutation
	familyID uint32
	agg      Aggregator
	// serverTime: the timestamp is the server's, taken again under the
	// row lock (at) so a write's time is the moment it takes effect: a
	// write that took its time before another write to the row locked it,
	// and committed after, would otherwise land below it and never be seen
	// (found by the linearizability test, robustness/).
	serverTime bool
}

// at returns p with a server timestamp resolved to now (milliseconds, as
// microseconds), and a native TTL counted from that same moment. Callers
// hold the row lock.
func (p prepared) at(now int64) prepared {
	if p.serverTime {
		p.Timestamp = now
		if p.TTLMicros != 0 {
			// prepare checked the TTL against an earlier now; a later one
			// can only move the expiry past year 9999 by the lock's wait.
			if exp, err := expiryFromTTL(now, p.TTLMicros); err == nil {
				p.ExpireAt = exp
			}
		}
	}
	return p
}

// prepare validates mutations against the schema and resolves server
// timestamps. It changes nothing.
func (e *Engine) prepare(m *Meta, row []byte, muts []Mutation) ([]prepared, error) {
	return e.prepareAt(m, row, muts, clock.MillisTruncated(e.clock.Now()))
}

// prepareAt is prepare with the clock read once by the caller: now is the
// server time for server timestamps and TTLs (ms-truncated micros).
func (e *Engine) prepareAt(m *Meta, row []byte, muts []Mutation, now int64) ([]prepared, error) {
	return e.prepareInto(nil, m, row, muts, now)
}

// prepareInto is prepareAt appending the prepared mutations to dst
// (MutateRows shares one array among its entries); on an error dst is
// returned as it was.
func (e *Engine) prepareInto(dst []prepared, m *Meta, row []byte, muts []Mutation, now int64) ([]prepared, error) {
	if err := prepareEntry(row, len(muts)); err != nil {
		return dst, err
	}
	start := len(dst)
	dst = slices.Grow(dst, len(muts))[:start+len(muts)]
	out := dst[start:]
	for i := range muts {
		// Filled in place: a prepared is large enough for its copy to show.
		if err := e.prepareOne(&out[i], m, i, &muts[i], now); err != nil {
			return dst[:start], err
		}
	}
	return dst, nil
}

// prepareEntry checks the row key and mutation count of an entry of n
// mutations, as prepareInto does before its mutations.
func prepareEntry(row []byte, n int) error {
	if err := validateRowKey(row); err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: no mutations given", ErrInvalid)
	}
	if n > MaxMutationsPerRow {
		return fmt.Errorf("%w: %d mutations in one row, the limit is %d", ErrInvalid, n, MaxMutationsPerRow)
	}
	return nil
}

// prepareOne validates mutation i of a row, mu, against the schema into p
// (prepareInto's step for one mutation; MutateRowsFrom's too).
func (e *Engine) prepareOne(p *prepared, m *Meta, i int, mu *Mutation, now int64) error {
	*p = prepared{Mutation: *mu}
	switch mu.Kind {
	case SetCell, DeleteFromColumn, DeleteFromFamily, AddToCell, MergeToCell:
		f, ok := m.Family(mu.Family)
		if !ok {
			return fmt.Errorf("%w: %q in table %s", ErrFamilyNotFound, mu.Family, m.Name)
		}
		p.familyID = f.ID
		p.agg = f.Aggregate
		if (mu.Kind == AddToCell || mu.Kind == MergeToCell) && f.Aggregate == NotAggregate {
			return fmt.Errorf("%w: family %q is not an aggregate family; AddToCell and MergeToCell need one", ErrInvalid, mu.Family)
		}
		if mu.Kind == MergeToCell && f.Aggregate != AggHLL && len(mu.Value) != 8 {
			return fmt.Errorf("%w: MergeToCell into a %s family needs an 8-byte big-endian integer, got %d bytes", ErrInvalid, f.Aggregate, len(mu.Value))
		}
	case DeleteFromRow:
	default:
		return fmt.Errorf("%w: mutation %d has no known kind", ErrInvalid, i)
	}
	if len(mu.Qualifier) > MaxQualifierBytes {
		return fmt.Errorf("%w: column qualifier is %d bytes, the limit is %d", ErrInvalid, len(mu.Qualifier), MaxQualifierBytes)
	}
	switch mu.Kind {
	case SetCell, AddToCell, MergeToCell:
		if len(mu.Value) > MaxValueBytes {
			return fmt.Errorf("%w: value is %d bytes, the limit is %d", ErrInvalid, len(mu.Value), MaxValueBytes)
		}
		switch {
		case mu.Timestamp == ServerTimestamp:
			p.Timestamp, p.serverTime = now, true
		case mu.Timestamp < 0:
			return fmt.Errorf("%w: timestamp %d is negative (only -1, server time, is allowed)", ErrInvalid, mu.Timestamp)
		case mu.Timestamp > cell.MaxTimestamp:
			return fmt.Errorf("%w: timestamp %d is past year 9999", ErrInvalid, mu.Timestamp)
		case mu.Timestamp%cell.MicrosPerMilli != 0 && !m.Micros:
			if !mu.AutoTimestamp {
				return fmt.Errorf("%w: timestamp %d has sub-millisecond precision; Bigtable timestamps are microseconds with millisecond granularity (use %d)",
					ErrInvalid, mu.Timestamp, mu.Timestamp-mu.Timestamp%cell.MicrosPerMilli)
			}
			p.Timestamp = mu.Timestamp - mu.Timestamp%cell.MicrosPerMilli
		}
		if f, _ := m.Family(mu.Family); f != nil && f.ExpiryTimestamps && (mu.Timestamp == ServerTimestamp || mu.AutoTimestamp) {
			return fmt.Errorf("%w: family %q holds expiry timestamps (one-second expiration); a write with a server or client-generated timestamp would expire at once — set the cell's timestamp to its expiry time (for a time-to-live on real write times, use a native cell TTL in a family without this guard)", ErrPrecondition, mu.Family)
		}
		if mu.TTLMicros != 0 {
			exp, err := expiryFromTTL(now, mu.TTLMicros)
			if err != nil {
				return err
			}
			p.ExpireAt = exp
		}
		if p.ExpireAt < 0 || p.ExpireAt > cell.MaxTimestamp {
			return fmt.Errorf("%w: cell expiry %d is outside year 1970..9999", ErrInvalid, mu.ExpireAt)
		}
	case DeleteFromColumn:
		if mu.StartTS < 0 || mu.EndTS < 0 {
			return fmt.Errorf("%w: delete time range must not be negative", ErrInvalid)
		}
		if mu.EndTS != 0 && mu.EndTS < mu.StartTS {
			return fmt.Errorf("%w: delete time range ends (%d) before it starts (%d)", ErrInvalid, mu.EndTS, mu.StartTS)
		}
		if !m.Micros && (mu.StartTS%cell.MicrosPerMilli != 0 || mu.EndTS%cell.MicrosPerMilli != 0) {
			return fmt.Errorf("%w: delete time range must have millisecond granularity", ErrInvalid)
		}
	}
	return nil
}

// MutateRow applies mutations to one row atomically and durably.
func (e *Engine) MutateRow(instance, table string, row []byte, muts []Mutation) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	m, err := e.Table(instance, table)
	if err != nil {
		return err
	}
	ps, err := e.prepare(m, row, muts)
	if err != nil {
		return err
	}
	unlock := e.LockRow(m.ID, row)
	wait, err := e.applyLocked(m, row, ps)
	unlock()
	if err != nil {
		return err
	}
	return wait()
}

// applyLocked writes prepared mutations in one durable batch. The row lock
// must be held.
func (e *Engine) applyLocked(m *Meta, row []byte, ps []prepared) (wait func() error, err error) {
	defer func() {
		if err != nil {
			e.forgetAgendaMarks(m.ID, [][]byte{row})
		}
	}()
	needsRead := false
	for _, p := range ps {
		needsRead = needsRead || p.Kind != SetCell
	}
	var b *pebble.Batch
	if needsRead {
		b = e.store.NewIndexedBatch()
	} else {
		b = e.store.NewBatch()
	}
	rec := e.userRecord(m, row)
	stamp := e.writeStamp()
	now := clock.MillisTruncated(e.clock.Now())
	var cells cellsOnly
	cells.only = !needsRead && len(ps) <= cellsOnlyMax
	cells.look = e.lookups.look(now) && cells.only
	defer cells.close()
	for _, p := range ps {
		p = p.at(now)
		written, err := e.applyOne(b, m, row, p, stamp)
		if err == nil {
			err = cells.add(e, m, row, p)
		}
		if err != nil {
			e.endStamp(stamp)
			b.Close()
			return nil, err
		}
		if rec != nil {
			rec.Mods = append(rec.Mods, modWritten(p, written))
		}
	}
	var recs []changestream.Record
	if rec != nil {
		recs = []changestream.Record{*rec}
	}
	return e.commitVisibleAt(b, m, [][]byte{row}, nil, recs, stamp.Commit, cells.get())
}

// cellsOnlyMax is the most mutations a batch may hold and still look up
// whether its cells are new. Telling a cell is new costs a seek for each
// column not remembered (columnNewest), about as much as the write itself:
// two thirds of a bulk write's server CPU when every batch looked. The
// writes a point read is likely to meet in flight are small (a hot row's
// SetCell); a point read of a row a bulk load has in flight waits for it,
// one group sync at most, as it waits for any other write.
const cellsOnlyMax = 8

// cellsOnly gathers the cells a batch of SetCells puts, while it is still
// a batch that only puts new cells (see durability.beginCells).
type cellsOnly struct {
	only bool
	// look: a column not remembered is looked up (newCellLookups); when
	// not, its cell is not known new and the batch is not one of new
	// cells.
	look  bool
	cells []newCell
	// it looks up the newest versions of the batch's columns: opened at
	// the first lookup, when every row of the batch is locked (so no
	// write to them can land after its snapshot), and shared by the
	// batch's cells rather than an iterator opened for each (close).
	it *pebble.Iterator
}

// close closes the lookup iterator, if one was opened.
func (c *cellsOnly) close() {
	if c.it != nil {
		c.it.Close()
		c.it = nil
	}
}

// add adds the cell p puts in row, under the row's lock. A cell that may
// replace one already there ends it (a read skipping the key would miss the
// old cell too): one not newer than every version of its column.
func (c *cellsOnly) add(e *Engine, m *Meta, row []byte, p prepared) error {
	if p.Kind != SetCell && p.Kind != AddToCell && p.Kind != MergeToCell {
		return nil
	}
	return c.addAt(e, m, row, p, e.stripe(m.ID, row))
}

// addAt is add for a row whose row-lock stripe is known.
func (c *cellsOnly) addAt(e *Engine, m *Meta, row []byte, p prepared, stripe int) error {
	if p.Kind != SetCell && p.Kind != AddToCell && p.Kind != MergeToCell {
		return nil
	}
	cn := &e.newest[stripe]
	if len(cn.cols) == 0 && !(c.only && c.look) {
		// Not looking, and the stripe remembers no column to raise: a
		// bulk write's cells (put would not remember them either), or a
		// cell not known new while writers do not look (newCellLookups),
		// with no cell key built.
		c.only, c.cells = false, nil
		return nil
	}
	k := storage.CellKey(m.ID, row, p.familyID, p.Qualifier, p.Timestamp)
	fresh, err := cn.put(e, k, p.Timestamp, c)
	if err != nil {
		return err
	}
	if !c.only {
		return nil
	}
	if !fresh {
		c.only, c.cells = false, nil
		return nil
	}
	c.cells = append(c.cells, newCell{stripe: stripe, key: k})
	return nil
}

// columnNewest remembers, for a few columns of the rows of one row-lock
// stripe, a timestamp no version of the column is newer than, so a write
// can tell it puts a new cell without looking (a hot row's column is
// written again and again). It is used only under the stripe's lock. Every
// write through applyOne raises the columns it writes; a cell written by
// any other way (a replicated or raw cell, an import) bumps
// Engine.cellGen, which empties every stripe's memory.
type columnNewest struct {
	gen  uint64
	cols map[string]int64
}

// columnsRemembered bounds a stripe's memory; columnKeyRemembered, the key
// of a column it remembers.
const (
	columnsRemembered   = 8
	columnKeyRemembered = 256
)

// put records that the cell key k, at timestamp ts, is being written, and
// says whether it is newer than every version of its column (looking the
// column up through c, if it is not remembered, c still holds only new
// cells and looks).
func (cn *columnNewest) put(e *Engine, k []byte, ts int64, c *cellsOnly) (bool, error) {
	look := c.only && c.look
	if g := e.cellGen.Load(); cn.gen != g || cn.cols == nil {
		cn.gen, cn.cols = g, make(map[string]int64, columnsRemembered)
	}
	col := k[:len(k)-storage.SuffixLen]
	newest, ok := cn.cols[string(col)]
	if !ok && look && len(col) <= columnKeyRemembered {
		var found bool
		var err error
		if newest, found, err = e.newestVersion(&c.it, col); err != nil {
			return false, err
		}
		if !found {
			newest = -1
		}
		ok = true
	}
	if !ok {
		return false, nil
	}
	if ts <= newest {
		return false, nil
	}
	if _, had := cn.cols[string(col)]; !had && len(cn.cols) >= columnsRemembered {
		clear(cn.cols)
	}
	cn.cols[string(col)] = ts
	return true, nil
}

// newestVersion returns the timestamp of the newest version of the column
// with key prefix col, if it has one, through *itp (opened if nil; the
// caller closes it).
func (e *Engine) newestVersion(itp **pebble.Iterator, col []byte) (int64, bool, error) {
	it := *itp
	if it == nil {
		var err error
		if it, err = e.store.NewIter(nil); err != nil {
			return 0, false, err
		}
		*itp = it
	}
	it.SetBounds(col, storage.PrefixEnd(col))
	if !it.First() {
		return 0, false, it.Error()
	}
	k := it.Key()
	return storage.DecodeSuffix(k[len(k)-storage.SuffixLen:]), true, it.Error()
}

// get returns the cells, or nil if the batch is not one of new cells only,
// and ends the lookups (before the batch commits).
func (c *cellsOnly) get() []newCell {
	c.close()
	if !c.only {
		return nil
	}
	return c.cells
}

// modWritten is the record of one applied mutation: aggregate inputs are
// recorded as the SetCell of the value they produced.
func modWritten(p prepared, written []byte) changestream.Mod {
	mod := modOf(p)
	if p.Kind == AddToCell || p.Kind == MergeToCell {
		mod.Value = written
	}
	return mod
}

// applyOne adds one mutation to the batch and returns the value it wrote
// (for SetCell and the aggregates). While replicating, stamp is the write's
// replication stamp: cells carry it and deletes leave a tombstone.
func (e *Engine) applyOne(b *pebble.Batch, m *Meta, row []byte, p prepared, stamp storage.Stamp) ([]byte, error) {
	if !stamp.IsZero() && (p.Kind == DeleteFromColumn || p.Kind == DeleteFromFamily || p.Kind == DeleteFromRow) {
		if err := addTombstone(b, m.ID, row, stamp, spanOf(p)); err != nil {
			return nil, err
		}
	}
	switch p.Kind {
	case SetCell:
		// The batch copies the key: most keys fit a buffer on the stack.
		var kb [128]byte
		k := storage.AppendCellKey(kb[:0], m.ID, row, p.familyID, p.Qualifier, p.Timestamp)
		if err := e.markAgendaLocked(b, m, p.familyID, row, p.Timestamp, p.ExpireAt); err != nil {
			return nil, err
		}
		// The value is encoded in place in the batch (no copy of its own).
		op := b.SetDeferred(len(k), storage.StampedLen(len(p.Value), p.ExpireAt, stamp))
		copy(op.Key, k)
		storage.AppendStamped(op.Value[:0], p.Value, p.ExpireAt, stamp)
		return p.Value, op.Finish()
	case AddToCell, MergeToCell:
		k := storage.CellKey(m.ID, row, p.familyID, p.Qualifier, p.Timestamp)
		in := p.Value
		if p.Kind == AddToCell {
			in = binary.BigEndian.AppendUint64(nil, uint64(p.IntInput))
		}
		old, closer, err := b.Get(k)
		switch {
		case err == pebble.ErrNotFound:
		case err != nil:
			return nil, err
		default:
			data, _, derr := storage.DecodeValue(old)
			if derr == nil {
				in = aggregate(p.agg, data, in)
			}
			closer.Close()
		}
		if err := e.markAgendaLocked(b, m, p.familyID, row, p.Timestamp, p.ExpireAt); err != nil {
			return nil, err
		}
		return in, b.Set(k, storage.EncodeStamped(in, p.ExpireAt, stamp), nil)
	case DeleteFromColumn:
		prefix := storage.ColumnPrefix(m.ID, row, p.familyID, p.Qualifier)
		lo, hi := prefix, storage.PrefixEnd(prefix)
		// Newest first: the range [StartTS, EndTS) maps to suffixes
		// (^EndTS, ^StartTS].
		if p.EndTS != 0 {
			lo = storage.AppendSuffix(append([]byte{}, prefix...), p.EndTS-1)
		}
		if p.StartTS > 0 {
			hi = storage.AppendSuffix(append([]byte{}, prefix...), p.StartTS-1)
		}
		return nil, deletePoints(b, lo, hi)
	case DeleteFromFamily:
		prefix := storage.FamilyPrefix(m.ID, row, p.familyID)
		return nil, deletePoints(b, prefix, storage.PrefixEnd(prefix))
	case DeleteFromRow:
		prefix := storage.RowPrefix(m.ID, row)
		return nil, deletePoints(b, prefix, storage.PrefixEnd(prefix))
	}
	return nil, fmt.Errorf("%w: unknown mutation kind %d", ErrInvalid, p.Kind)
}

// MinTTLMicros is the shortest native cell TTL: Bigtable's granularity.
const MinTTLMicros = 1000

// expiryFromTTL adds a TTL to the write time (ms-truncated micros), refusing
// TTLs below a millisecond and expiries past year 9999 without overflowing.
func expiryFromTTL(now int64, us int64) (int64, error) {
	if us < MinTTLMicros {
		return 0, fmt.Errorf("%w: cell TTL %v is below the 1ms minimum (negative and zero TTLs are refused too)", ErrInvalid, time.Duration(us)*time.Microsecond)
	}
	if us > cell.MaxTimestamp-now {
		return 0, fmt.Errorf("%w: a cell TTL of %d days puts the expiry past year 9999", ErrInvalid, us/86_400_000_000)
	}
	exp := now + us
	return exp - exp%cell.MicrosPerMilli, nil
}

// aggregate combines an aggregate cell's old value with an input.
func aggregate(agg Aggregator, old, in []byte) []byte {
	if len(old) != 8 || len(in) != 8 {
		return in
	}
	a, b := int64(binary.BigEndian.Uint64(old)), int64(binary.BigEndian.Uint64(in))
	switch agg {
	case AggSum:
		a = addWrap(a, b)
	case AggMin:
		a = min(a, b)
	case AggMax:
		a = max(a, b)
	default:
		return in
	}
	return binary.BigEndian.AppendUint64(nil, uint64(a))
}

// deletePoints deletes every key in [lo, hi) as seen by the indexed batch b
// (so earlier mutations of the same request count).
func deletePoints(b *pebble.Batch, lo, hi []byte) error {
	return deleteWhere(b, lo, hi, nil)
}

// deleteWhere deletes the keys in [lo, hi), as the indexed batch b sees
// them, whose value del accepts (every key when del is nil).
func deleteWhere(b *pebble.Batch, lo, hi []byte, del func(value []byte) bool) error {
	it, err := b.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	var keys [][]byte
	for it.First(); it.Valid(); it.Next() {
		if del == nil || del(it.Value()) {
			keys = append(keys, bytes.Clone(it.Key()))
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	for _, k := range keys {
		if err := b.Delete(k, nil); err != nil {
			return err
		}
	}
	return nil
}

// RowMutation is one entry of MutateRows.
type RowMutation struct {
	Row       []byte
	Mutations []Mutation
}

// MutateRows applies each entry atomically on its own and returns one error
// (or nil) per entry, read only (see MutateRowsFrom). The valid entries are
// committed in one durable batch.
func (e *Engine) MutateRows(instance, table string, entries []RowMutation) ([]error, error) {
	return e.MutateRowsFrom(instance, table, &rowMutations{entries: entries})
}

// rowMutations is a MutationSource over RowMutations.
type rowMutations struct {
	entries []RowMutation
	i       int // the current entry is entries[i-1]
	j       int // its next mutation
}

func (r *rowMutations) Len() int { return len(r.entries) }
func (r *rowMutations) Rewind()  { r.i, r.j = 0, 0 }

func (r *rowMutations) NextEntry() ([]byte, int, bool) {
	if r.i == len(r.entries) {
		return nil, 0, false
	}
	en := &r.entries[r.i]
	r.i, r.j = r.i+1, 0
	return en.Row, len(en.Mutations), true
}

func (r *rowMutations) NextMutation(mu *Mutation) bool {
	ms := r.entries[r.i-1].Mutations
	if r.j == len(ms) {
		return false
	}
	*mu = ms[r.j]
	r.j++
	return true
}
