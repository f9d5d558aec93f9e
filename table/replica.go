package table

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/storage"
)

// Replication, the engine's half. While the engine replicates (it has peer
// clusters), every table records its changes, so peers can pull the ones
// that originated here, and every write carries a replication stamp — its
// commit timestamp and this cluster's id — in the stored value. Writes
// pulled from a peer are applied by ApplyReplicated under last-writer-wins
// on those stamps; deletes cover only cells stamped before them and leave a
// tombstone so a concurrent, older write arriving later stays deleted.
//
// Commit timestamps form a hybrid logical clock: applying a peer's record
// raises the local sequence to its commit time, so every later local write
// is stamped after everything this cluster has seen.

// ReplicationRetention is how long records are kept for peers to pull while
// the engine replicates (a peer away longer must join again).
const ReplicationRetention = MaxChangeStreamRetention

// Metadata kinds of replication state.
const (
	metaKindTombstone  = "rtomb" // tableID | esc(row) | stamp commit | stamp cluster → deleteSpan
	metaKindCheckpoint = "rckpt" // origin \x00 tableID → position applied through
	metaKindDropped    = "rdrop" // instance \x00 table → stamp of its deletion
)

// schemaStamp stamps a schema change made here now.
func (e *Engine) schemaStamp() storage.Stamp {
	id, _ := e.Replicating()
	ts := e.seq.begin(e.nowMicros())
	e.seq.end(ts)
	return storage.Stamp{Commit: ts, Cluster: id}
}

func putDropMarker(b *pebble.Batch, instance, name string, st storage.Stamp) error {
	v, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return b.Set(storage.MetaKey(metaKindDropped, instance+"\x00"+name), v, nil)
}

// DroppedTable is a table deleted while replicating, kept so peers that
// still have it drop it too.
type DroppedTable struct {
	Instance, Name string
	Stamp          storage.Stamp
}

// DroppedTables lists the drop markers.
func (e *Engine) DroppedTables() ([]DroppedTable, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	prefix := storage.MetaPrefix(metaKindDropped)
	it, err := e.store.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: storage.PrefixEnd(prefix)})
	if err != nil {
		return nil, err
	}
	var out []DroppedTable
	for ok := it.First(); ok; ok = it.Next() {
		inst, name, _ := strings.Cut(string(it.Key()[len(prefix):]), "\x00")
		d := DroppedTable{Instance: inst, Name: name}
		if err := json.Unmarshal(it.Value(), &d.Stamp); err != nil {
			it.Close()
			return nil, fmt.Errorf("%w: drop marker: %v", storage.ErrCorruptKey, err)
		}
		out = append(out, d)
	}
	return out, it.Close()
}

// SetReplicating turns replication on for this cluster (id cluster), or
// off (""). No write is half-way through while it changes, so each write is
// recorded and stamped exactly when it commits while replication is on.
func (e *Engine) SetReplicating(cluster string) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	unlock := e.lockAllRows()
	defer unlock()
	if cluster == "" {
		e.replCluster.Store(nil)
		return nil
	}
	e.replCluster.Store(&cluster)
	return nil
}

// Replicating returns this cluster's id while the engine replicates.
func (e *Engine) Replicating() (string, bool) {
	p := e.replCluster.Load()
	if p == nil {
		return "", false
	}
	return *p, true
}

// writeStamp takes the commit timestamp of a user write while replicating
// (the caller must end it: commitVisibleAt does). Zero otherwise.
func (e *Engine) writeStamp() storage.Stamp {
	id, ok := e.Replicating()
	if !ok {
		return storage.Stamp{}
	}
	return storage.Stamp{Commit: e.seq.begin(e.nowMicros()), Cluster: id}
}

// endStamp gives back a write stamp's timestamp when the write fails
// before commitVisibleAt.
func (e *Engine) endStamp(st storage.Stamp) {
	if st.Commit != 0 {
		e.seq.end(st.Commit)
	}
}

// deleteSpan is what a tombstone covers in its row.
type deleteSpan struct {
	kind           changestream.ModKind
	family         uint32
	qualifier      []byte
	startTS, endTS int64
}

func (d deleteSpan) encode() []byte {
	b := []byte{byte(d.kind)}
	b = binary.BigEndian.AppendUint32(b, d.family)
	b = binary.AppendUvarint(b, uint64(len(d.qualifier)))
	b = append(b, d.qualifier...)
	b = binary.AppendVarint(b, d.startTS)
	return binary.AppendVarint(b, d.endTS)
}

func decodeSpan(v []byte) (deleteSpan, error) {
	bad := fmt.Errorf("%w: tombstone %x", storage.ErrCorruptKey, v)
	if len(v) < 6 {
		return deleteSpan{}, bad
	}
	d := deleteSpan{kind: changestream.ModKind(v[0]), family: binary.BigEndian.Uint32(v[1:5])}
	v = v[5:]
	n, k := binary.Uvarint(v)
	if k <= 0 || uint64(len(v)-k) < n {
		return deleteSpan{}, bad
	}
	d.qualifier, v = append([]byte(nil), v[k:k+int(n)]...), v[k+int(n):]
	var k1, k2 int
	d.startTS, k1 = binary.Varint(v)
	if k1 <= 0 {
		return deleteSpan{}, bad
	}
	d.endTS, k2 = binary.Varint(v[k1:])
	if k2 <= 0 {
		return deleteSpan{}, bad
	}
	return d, nil
}

// covers says whether the span covers a cell.
func (d deleteSpan) covers(family uint32, qualifier []byte, ts int64) bool {
	switch d.kind {
	case changestream.DeleteFromRow:
		return true
	case changestream.DeleteFromFamily:
		return d.family == family
	case changestream.DeleteFromColumn:
		return d.family == family && bytes.Equal(d.qualifier, qualifier) && ts >= d.startTS && (d.endTS == 0 || ts < d.endTS)
	}
	return false
}

// tableTombstones is the key prefix of a table's tombstones.
func tableTombstones(tableID uint64) []byte {
	return storage.MetaKey(metaKindTombstone, string(binary.BigEndian.AppendUint64(nil, tableID)))
}

// tombstonePrefix is the key prefix of one row's tombstones.
func tombstonePrefix(tableID uint64, row []byte) []byte {
	return storage.MetaKey(metaKindTombstone, string(storage.RowPrefix(tableID, row)[1:]))
}

func tombstoneKey(tableID uint64, row []byte, st storage.Stamp) []byte {
	k := tombstonePrefix(tableID, row)
	k = binary.BigEndian.AppendUint64(k, uint64(st.Commit))
	return append(k, st.Cluster...)
}

// addTombstone remembers a delete stamped st.
func addTombstone(b *pebble.Batch, tableID uint64, row []byte, st storage.Stamp, d deleteSpan) error {
	return b.Set(tombstoneKey(tableID, row, st), d.encode(), nil)
}

// coveredByTombstone says whether a delete stamped after st covers the cell.
func coveredByTombstone(r pebble.Reader, tableID uint64, row []byte, family uint32, qualifier []byte, ts int64, st storage.Stamp) (bool, error) {
	prefix := tombstonePrefix(tableID, row)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: storage.PrefixEnd(prefix)})
	if err != nil {
		return false, err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		rest := it.Key()[len(prefix):]
		if len(rest) < 8 {
			continue
		}
		tst := storage.Stamp{Commit: int64(binary.BigEndian.Uint64(rest)), Cluster: string(rest[8:])}
		if !st.Less(tst) {
			continue
		}
		d, err := decodeSpan(it.Value())
		if err != nil {
			return false, err
		}
		if d.covers(family, qualifier, ts) {
			return true, nil
		}
	}
	return false, it.Error()
}

// anyTombstone says whether a table has any tombstone.
func anyTombstone(r pebble.Reader, tableID uint64) (bool, error) {
	prefix := tableTombstones(tableID)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: storage.PrefixEnd(prefix)})
	if err != nil {
		return false, err
	}
	found := it.First()
	return found, it.Close()
}

// TrimTombstones deletes tombstones stamped before commit time below: once
// every peer's records up to below are applied here, no older write can
// arrive. It returns how many it deleted.
func (e *Engine) TrimTombstones(below int64) (int, error) {
	if err := e.enter(); err != nil {
		return 0, err
	}
	defer e.leave()
	prefix := storage.MetaPrefix(metaKindTombstone)
	it, err := e.store.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: storage.PrefixEnd(prefix)})
	if err != nil {
		return 0, err
	}
	b := e.store.NewBatch()
	defer b.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		// The stamp follows the table id and the escaped row (whose bytes,
		// like the stamp's, may hold 0x00 0x01: parse, do not search).
		rest := k[len(prefix):]
		rowLen := -1
		if len(rest) > 8 {
			rowLen = storage.EscapedLen(rest[8:])
		}
		if rowLen < 0 || len(rest) < 8+rowLen+8 {
			continue
		}
		if int64(binary.BigEndian.Uint64(rest[8+rowLen:])) < below {
			if err := b.Delete(k, nil); err != nil {
				it.Close()
				return 0, err
			}
			n++
		}
	}
	if err := it.Close(); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, nil
	}
	return n, e.commitOpts(b, pebble.NoSync)
}

// spanOf is the tombstone span of a user delete.
func spanOf(p prepared) deleteSpan {
	switch p.Kind {
	case DeleteFromColumn:
		return deleteSpan{kind: changestream.DeleteFromColumn, family: p.familyID, qualifier: p.Qualifier, startTS: p.StartTS, endTS: p.EndTS}
	case DeleteFromFamily:
		return deleteSpan{kind: changestream.DeleteFromFamily, family: p.familyID}
	}
	return deleteSpan{kind: changestream.DeleteFromRow}
}

// checkpointKey is where the position applied through of one origin's
// records of one table is kept.
func checkpointKey(origin string, tableID uint64) []byte {
	return storage.MetaKey(metaKindCheckpoint, origin+"\x00"+string(binary.BigEndian.AppendUint64(nil, tableID)))
}

// Checkpoint returns the position through which origin's records of a table
// have been applied here.
func (e *Engine) Checkpoint(m *Meta, origin string) (changestream.Position, bool, error) {
	if err := e.checkOpen(); err != nil {
		return changestream.Position{}, false, err
	}
	v, closer, err := e.store.Get(checkpointKey(origin, m.ID))
	if err == pebble.ErrNotFound {
		return changestream.Position{}, false, nil
	}
	if err != nil {
		return changestream.Position{}, false, err
	}
	defer closer.Close()
	var p changestream.Position
	if err := json.Unmarshal(v, &p); err != nil {
		return changestream.Position{}, false, fmt.Errorf("%w: checkpoint: %v", storage.ErrCorruptKey, err)
	}
	return p, true, nil
}

func setCheckpoint(b *pebble.Batch, origin string, tableID uint64, p changestream.Position) error {
	v, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return b.Set(checkpointKey(origin, tableID), v, nil)
}

// SetCheckpoint durably sets a checkpoint (a joining cluster starts each
// origin where the copy it received left off).
func (e *Engine) SetCheckpoint(m *Meta, origin string, p changestream.Position) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	b := e.store.NewBatch()
	defer b.Close()
	if err := setCheckpoint(b, origin, m.ID, p); err != nil {
		return err
	}
	return e.commit(b)
}

// ReplicaStats counts what ApplyReplicated did.
type ReplicaStats struct {
	// Applied mods changed this cluster; Superseded ones lost to a newer
	// write or delete here; Skipped ones named a family this table lacks.
	Applied, Superseded, Skipped int
}

// ApplyReplicated applies records that originated on cluster origin (their
// Position.Commit is the origin's commit timestamp) and advances the
// origin's checkpoint for the table to through, all in one batch: applying
// a record twice changes nothing. Applied records are recorded in this
// table's change stream with their source cluster, so they are never
// shipped back; a garbage-collection record keeps its type and reason.
func (e *Engine) ApplyReplicated(m *Meta, origin string, recs []changestream.Record, through changestream.Position) (ReplicaStats, error) {
	var st ReplicaStats
	if err := e.enter(); err != nil {
		return st, err
	}
	defer e.leave()
	if origin == "" {
		return st, fmt.Errorf("%w: replicated records need an origin cluster", ErrInvalid)
	}
	if err := validateReplicated(recs); err != nil {
		return st, err
	}
	rows := make([][]byte, 0, len(recs))
	for _, r := range recs {
		rows = append(rows, r.RowKey)
		e.seq.observe(r.Commit)
	}
	unlock := e.LockRows(m.ID, rows)
	defer unlock()
	b := e.store.NewIndexedBatch()
	defer b.Close()
	// Most tables have no tombstones (no deletes lately): then no write
	// needs checking against one, which saves an iterator per cell.
	tombs, err := anyTombstone(b, m.ID)
	if err != nil {
		return st, err
	}
	out := make([]changestream.Record, 0, len(recs))
	for _, r := range recs {
		stamp := storage.Stamp{Commit: r.Commit, Cluster: origin}
		// A garbage collection (the GC leader's versions deletions) needs no
		// tombstone: a write older than it that arrives later is itself
		// beyond the family's versions and is collected in turn.
		gc := r.Type == changestream.GarbageCollection
		for _, mod := range r.Mods {
			res, err := e.applyRemoteMod(b, m, r.RowKey, mod, stamp, !gc, &tombs)
			if err != nil {
				return st, err
			}
			switch res {
			case remoteApplied:
				st.Applied++
			case remoteSuperseded:
				st.Superseded++
			default:
				st.Skipped++
			}
		}
		rec := r
		rec.Position = changestream.Position{}
		rec.SourceCluster = origin
		out = append(out, rec)
	}
	if err := setCheckpoint(b, origin, m.ID, through); err != nil {
		return st, err
	}
	logged, err := e.logViewRows(b, m, rows, nil) // viewlog.go
	defer logged()
	if err != nil {
		return st, err
	}
	// Cells and tombstones go to the failover log too (commitlog.go).
	finished, err := e.logBatch(b)
	if err != nil {
		return st, err
	}
	defer finished()
	// Not synced: a batch lost in a crash takes its checkpoint with it, and
	// the records are pulled again.
	return st, e.commitRecorded(b, m, nil, out, pebble.NoSync, true)
}

// validateReplicated checks a peer's records as the local write path checks
// a client's mutations — row key, commit time, timestamps, expiry, sizes,
// delete ranges — so a record no client could have written (a peer of
// another version, damaged bytes) refuses the whole batch before anything
// is applied or the commit sequence moves. Mods of kinds unknown here stay
// skipped, as before.
func validateReplicated(recs []changestream.Record) error {
	for i, r := range recs {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: replicated record %d: %s", ErrInvalid, i, fmt.Sprintf(format, args...))
		}
		if err := validateRowKey(r.RowKey); err != nil {
			return bad("%v", err)
		}
		if r.Commit <= 0 || r.Commit > cell.MaxTimestamp {
			return bad("commit time %d is outside year 1970..9999", r.Commit)
		}
		for _, mod := range r.Mods {
			if len(mod.Qualifier) > MaxQualifierBytes {
				return bad("column qualifier is %d bytes, the limit is %d", len(mod.Qualifier), MaxQualifierBytes)
			}
			switch mod.Kind {
			case changestream.SetCell:
				if len(mod.Value) > MaxValueBytes {
					return bad("value is %d bytes, the limit is %d", len(mod.Value), MaxValueBytes)
				}
				if mod.Timestamp < 0 || mod.Timestamp > cell.MaxTimestamp {
					return bad("timestamp %d is outside 0..year 9999", mod.Timestamp)
				}
				if mod.ExpireAt < 0 || mod.ExpireAt > cell.MaxTimestamp {
					return bad("cell expiry %d is outside year 1970..9999", mod.ExpireAt)
				}
			case changestream.DeleteFromColumn:
				if mod.StartTS < 0 || mod.EndTS < 0 || mod.EndTS != 0 && mod.EndTS < mod.StartTS {
					return bad("delete time range [%d, %d) is negative or reversed", mod.StartTS, mod.EndTS)
				}
			}
		}
	}
	return nil
}

type remoteResult int

const (
	remoteApplied remoteResult = iota
	remoteSuperseded
	remoteSkipped
)

// applyRemoteMod applies one mod of a peer's record stamped st.
func (e *Engine) applyRemoteMod(b *pebble.Batch, m *Meta, row []byte, mod changestream.Mod, st storage.Stamp, tombstone bool, tombs *bool) (remoteResult, error) {
	var fam uint32
	if mod.Kind != changestream.DeleteFromRow {
		f, ok := m.Family(mod.Family)
		if !ok {
			return remoteSkipped, nil
		}
		fam = f.ID
	}
	switch mod.Kind {
	case changestream.SetCell:
		k := storage.CellKey(m.ID, row, fam, mod.Qualifier, mod.Timestamp)
		old, closer, err := b.Get(k)
		switch {
		case err == pebble.ErrNotFound:
		case err != nil:
			return 0, err
		default:
			_, _, ost, derr := storage.DecodeStamped(old)
			closer.Close()
			if derr == nil && !ost.Less(st) {
				return remoteSuperseded, nil
			}
		}
		if *tombs {
			covered, err := coveredByTombstone(b, m.ID, row, fam, mod.Qualifier, mod.Timestamp, st)
			if err != nil {
				return 0, err
			}
			if covered {
				return remoteSuperseded, nil
			}
		}
		if err := e.markAgenda(b, m, fam, row, mod.Timestamp, mod.ExpireAt); err != nil {
			return 0, err
		}
		e.cellGen.Add(1) // a cell not written through applyOne (columnNewest)
		return remoteApplied, b.Set(k, storage.EncodeStamped(mod.Value, mod.ExpireAt, st), nil)
	case changestream.DeleteFromColumn, changestream.DeleteFromFamily, changestream.DeleteFromRow:
		var lo, hi []byte
		span := deleteSpan{kind: mod.Kind, family: fam}
		switch mod.Kind {
		case changestream.DeleteFromColumn:
			prefix := storage.ColumnPrefix(m.ID, row, fam, mod.Qualifier)
			lo, hi = prefix, storage.PrefixEnd(prefix)
			if mod.EndTS != 0 {
				lo = storage.AppendSuffix(append([]byte{}, prefix...), mod.EndTS-1)
			}
			if mod.StartTS > 0 {
				hi = storage.AppendSuffix(append([]byte{}, prefix...), mod.StartTS-1)
			}
			span.qualifier, span.startTS, span.endTS = mod.Qualifier, mod.StartTS, mod.EndTS
		case changestream.DeleteFromFamily:
			prefix := storage.FamilyPrefix(m.ID, row, fam)
			lo, hi = prefix, storage.PrefixEnd(prefix)
		default:
			prefix := storage.RowPrefix(m.ID, row)
			lo, hi = prefix, storage.PrefixEnd(prefix)
		}
		if err := deleteOlder(b, lo, hi, st); err != nil {
			return 0, err
		}
		if !tombstone {
			return remoteApplied, nil
		}
		*tombs = true
		return remoteApplied, addTombstone(b, m.ID, row, st, span)
	}
	return remoteSkipped, nil
}

// deleteOlder deletes the cells of [lo, hi) stamped before st.
func deleteOlder(b *pebble.Batch, lo, hi []byte, st storage.Stamp) error {
	return deleteWhere(b, lo, hi, func(v []byte) bool {
		_, _, cst, err := storage.DecodeStamped(v)
		return err != nil || cst.Less(st)
	})
}

// ExportKind says what an ExportItem carries.
type ExportKind int

// The kinds of export items, in the order Export sends them per table.
const (
	ExportTable      ExportKind = iota + 1 // Meta: a table's schema
	ExportCells                            // Pairs: raw cell keys and values
	ExportTombstones                       // Pairs: raw tombstone keys and values
	ExportCheckpoint                       // Origin, Position: how far this cluster applied a peer's records
)

// ExportItem is one piece of an export.
type ExportItem struct {
	Kind     ExportKind
	Meta     *Meta
	Pairs    [][2][]byte
	Origin   string
	Position changestream.Position
}

// exportChunkBytes is about how much one ExportCells item carries.
const exportChunkBytes = 1 << 20

// Export hands a consistent image of every table to fn, for a cluster
// joining this one: per table its schema, its cells, its replication
// tombstones and this cluster's checkpoints of other peers. It returns the
// commit timestamp through which the image holds every change committed
// here: the joining cluster pulls this cluster's records after it (any
// later change that made it into the image is applied again, harmlessly).
func (e *Engine) Export(fn func(ExportItem) error) (closed int64, err error) {
	if err := e.enter(); err != nil {
		return 0, err
	}
	defer e.leave()
	closed = e.seq.closed(e.nowMicros())
	snap := e.store.NewSnapshot()
	defer snap.Close()
	e.mu.RLock()
	metas := make([]*Meta, 0, len(e.tables))
	for _, m := range e.tables {
		metas = append(metas, m)
	}
	e.mu.RUnlock()
	ckpts, err := readCheckpoints(snap)
	if err != nil {
		return 0, err
	}
	for _, m := range metas {
		_, closer, err := snap.Get(tableMetaKey(m.Instance, m.Name))
		if err == pebble.ErrNotFound {
			continue // created after the snapshot
		}
		if err != nil {
			return 0, err
		}
		closer.Close()
		if err := fn(ExportItem{Kind: ExportTable, Meta: m}); err != nil {
			return 0, err
		}
		tomb := tableTombstones(m.ID)
		for _, span := range []struct {
			kind   ExportKind
			lo, hi []byte
		}{
			{ExportCells, storage.TablePrefix(m.ID), storage.TableEnd(m.ID)},
			{ExportTombstones, tomb, storage.PrefixEnd(tomb)},
		} {
			if err := exportSpan(snap, span.lo, span.hi, func(pairs [][2][]byte) error {
				return fn(ExportItem{Kind: span.kind, Meta: m, Pairs: pairs})
			}); err != nil {
				return 0, err
			}
		}
		for _, c := range ckpts {
			if c.tableID == m.ID {
				if err := fn(ExportItem{Kind: ExportCheckpoint, Meta: m, Origin: c.origin, Position: c.pos}); err != nil {
					return 0, err
				}
			}
		}
	}
	return closed, nil
}

func exportSpan(r pebble.Reader, lo, hi []byte, fn func([][2][]byte) error) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	defer it.Close()
	var pairs [][2][]byte
	size := 0
	for ok := it.First(); ok; ok = it.Next() {
		pairs = append(pairs, [2][]byte{bytes.Clone(it.Key()), bytes.Clone(it.Value())})
		size += len(it.Key()) + len(it.Value())
		if size >= exportChunkBytes {
			if err := fn(pairs); err != nil {
				return err
			}
			pairs, size = nil, 0
		}
	}
	if err := it.Error(); err != nil {
		return err
	}
	if len(pairs) > 0 {
		return fn(pairs)
	}
	return nil
}

type checkpoint struct {
	origin  string
	tableID uint64
	pos     changestream.Position
}

func readCheckpoints(r pebble.Reader) ([]checkpoint, error) {
	prefix := storage.MetaPrefix(metaKindCheckpoint)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: storage.PrefixEnd(prefix)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []checkpoint
	for ok := it.First(); ok; ok = it.Next() {
		rest := it.Key()[len(prefix):]
		if len(rest) < 9 || rest[len(rest)-9] != 0 {
			return nil, fmt.Errorf("%w: checkpoint key %x", storage.ErrCorruptKey, it.Key())
		}
		c := checkpoint{origin: string(rest[:len(rest)-9]), tableID: binary.BigEndian.Uint64(rest[len(rest)-8:])}
		if err := json.Unmarshal(it.Value(), &c.pos); err != nil {
			return nil, fmt.Errorf("%w: checkpoint: %v", storage.ErrCorruptKey, err)
		}
		out = append(out, c)
	}
	return out, it.Error()
}

// ImportTable creates a table copied from a peer: the peer's schema (its
// family ids too, so its raw cells can be imported) under a new local id.
func (e *Engine) ImportTable(peer *Meta) (*Meta, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	if err := peer.CheckFamilies(); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	m := peer.clone()
	m.Restored = nil
	if m.ChangeStream != nil {
		m.ChangeStream = &ChangeStream{Retention: m.ChangeStream.Retention, EnabledMicros: e.nowMicros()}
	}
	if err := e.insertTableLocked(m); err != nil {
		return nil, err
	}
	return m, nil
}

// ImportPairs writes exported cells or tombstones of a peer's table into
// local table m (moved to its id). Not synced: the join is marked complete
// with a synced write after the last pair.
func (e *Engine) ImportPairs(m *Meta, kind ExportKind, pairs [][2][]byte) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	b := e.store.NewBatch()
	defer b.Close()
	tomb := storage.MetaPrefix(metaKindTombstone)
	// The rows whose cells arrive are logged for maintained views (a
	// view may be created over the table while it is imported).
	var rows [][]byte
	for _, p := range pairs {
		var k []byte
		switch kind {
		case ExportCells:
			if err := validImportedCell(p[0], p[1]); err != nil {
				return err
			}
			if d, err := storage.DecodeCellKey(p[0]); err == nil && (len(rows) == 0 || !bytes.Equal(rows[len(rows)-1], d.Row)) {
				rows = append(rows, bytes.Clone(d.Row))
			}
			var err error
			if k, err = storage.WithTableID(nil, p[0], m.ID); err != nil {
				return err
			}
		case ExportTombstones:
			if err := validImportedTombstone(tomb, p[0], p[1]); err != nil {
				return err
			}
			k = bytes.Clone(p[0])
			binary.BigEndian.PutUint64(k[len(tomb):], m.ID)
		default:
			return fmt.Errorf("%w: export kind %d holds no pairs", ErrInvalid, kind)
		}
		if err := b.Set(k, p[1], nil); err != nil {
			return err
		}
	}
	if kind == ExportCells {
		e.gcGen.bump(m.ID) // no agenda entries came with them
		e.cellGen.Add(1)   // nor through applyOne (columnNewest)
	}
	if len(rows) > 0 {
		logged, err := e.logViewRows(b, m, rows, nil) // viewlog.go
		defer logged()
		if err != nil {
			return err
		}
	}
	finished, err := e.logBatch(b) // commitlog.go: a take-over replays it
	if err != nil {
		return err
	}
	defer finished()
	return e.commitOpts(b, pebble.NoSync)
}

// validImportedCell checks a cell a peer's snapshot carries as the engine's
// own reads will decode it: a well-formed cell key of a row and timestamp a
// client could have written, and a value whose header decodes.
func validImportedCell(k, v []byte) error {
	d, err := storage.DecodeCellKey(k)
	if err != nil {
		return err
	}
	if err := validateRowKey(d.Row); err != nil {
		return fmt.Errorf("%w: imported cell: %w", storage.ErrCorruptKey, err)
	}
	if d.Timestamp < 0 || d.Timestamp > cell.MaxTimestamp {
		return fmt.Errorf("%w: imported cell with timestamp %d", storage.ErrCorruptKey, d.Timestamp)
	}
	_, exp, _, err := storage.DecodeStamped(v)
	if err != nil {
		return err
	}
	if exp < 0 || exp > cell.MaxTimestamp {
		return fmt.Errorf("%w: imported cell expiring at %d", storage.ErrCorruptKey, exp)
	}
	return nil
}

// validImportedTombstone checks a tombstone of a peer's snapshot as
// coveredByTombstone and TrimTombstones will read it: prefix, table id,
// escaped row, eight bytes of commit time and the cluster id; a value that
// decodes as a delete span.
func validImportedTombstone(prefix, k, v []byte) error {
	bad := fmt.Errorf("%w: tombstone key %x", storage.ErrCorruptKey, k)
	if !bytes.HasPrefix(k, prefix) || len(k) < len(prefix)+8 {
		return bad
	}
	rest := k[len(prefix):]
	n := storage.EscapedLen(rest[8:])
	if n < 0 || len(rest) < 8+n+8 {
		return bad
	}
	row, err := storage.DecodeRowKey(append(storage.TablePrefix(0)[:1], rest[:8+n]...))
	if err != nil || validateRowKey(row) != nil {
		return bad
	}
	_, err = decodeSpan(v)
	return err
}
