package table

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/rangekey"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/sstable/block"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/ebbtable/ebbtable/storage"
)

// Span moves (docs/scale-out.md, "Storage: shared SSTables and span
// moves"). A tablet is a range of one table's rows, [start, end); its cells
// are the contiguous keys [RowBound(id, start), RowBound(id, end)). A
// planned move of a tablet from engine S to engine T, both on one shared
// object store, goes:
//
//  1. the caller fences the span on S (no more writes to it, in-flight ones
//     finished);
//  2. x := S.ExportSpan(...): references to the span's shared SSTables (L5,
//     L6) plus the span's keys still in S's local levels (memtables, L0–L4,
//     deletions included) as one SSTable, plus the GC agenda entries of its
//     rows; x.Marshal() is what travels;
//  3. T.IngestSpan(ctx, x'): one atomic ingest that first removes whatever T
//     held in the span, then attaches the shared SSTables and adds the
//     local ones; T's collector sweeps the table whole on its next pass;
//  4. the caller flips ownership, then S.ExciseSpan(...) and x.Release().
//
// Nothing here changes S before step 4, and step 3 is one MANIFEST edit on
// T: a crash anywhere leaves the span whole on S, and on T either whole or
// absent. Keys embed the table id, and shared SSTables cannot be rewritten,
// so both engines must know the table under the same id (TableSpec.ID: a
// cluster assigns table ids cluster-wide) and its families under the same
// ids.

// SpanExport is a span of one table's rows taken from a source engine by
// ExportSpan, for IngestSpan on another engine sharing its object store.
type SpanExport struct {
	Instance string
	Table    string
	// TableID is the table's id at the source; IngestSpan refuses a target
	// whose table has another.
	TableID uint64
	// Families maps each family name to its id at the source.
	Families map[string]uint32
	// StartRow and EndRow bound the span's rows: [StartRow, EndRow); an
	// empty EndRow means to the table's end.
	StartRow, EndRow []byte

	shared []sharedRef
	local  []byte // an SSTable of the local levels' keys; nil: none
	stats  SpanStats
	agenda []AgendaEntry

	commitHigh int64 // source only: see CommitHighWater

	encoded []byte
	handles []objstorage.RemoteObjectBackingHandle // source only
	once    sync.Once
}

// SpanStats counts what an export holds.
type SpanStats struct {
	// SharedSSTs and SharedBytes are the shared SSTables referenced (and
	// the bytes they hold in the span, estimated): attached, not copied.
	SharedSSTs  int
	SharedBytes uint64
	// LocalKeys and LocalBytes are the keys copied from the source's local
	// levels (memtables, L0–L4; point deletions and range deletions
	// included) and the size of the SSTable holding them.
	LocalKeys  int64
	LocalBytes int64
	// AgendaEntries are the GC agenda entries of the span's rows.
	AgendaEntries int
	// Encoded is the length of Marshal's result: the bytes that travel.
	Encoded int64
}

// Stats returns what the export holds.
func (x *SpanExport) Stats() SpanStats { return x.stats }

// CommitHighWater is, at the source, the change-stream commit timestamp
// the export was read at: the export holds every commit with a timestamp
// at or below it and none above (ExportSpan reads at a moment with no
// commit in flight). A move ships the span's change records up to it, no
// further: a deletion the source's collector commits later is not in the
// export, and the target's collector makes (and records) it again.
func (x *SpanExport) CommitHighWater() int64 { return x.commitHigh }

// Release lets the source's Pebble drop the shared SSTables the export
// references (once neither it nor any target needs them). Call it on the
// source once the target has ingested, or the move is abandoned; the
// export cannot be ingested after. It does nothing on an unmarshaled export.
func (x *SpanExport) Release() {
	x.once.Do(func() {
		for _, h := range x.handles {
			h.Close()
		}
	})
}

// sharedRef is one shared SSTable reference (Pebble's SharedSSTMeta, in
// plain fields).
type sharedRef struct {
	Backing          []byte `json:"b"`
	Smallest         ikey   `json:"s"`
	Largest          ikey   `json:"l"`
	SmallestPoint    ikey   `json:"sp"`
	LargestPoint     ikey   `json:"lp"`
	SmallestRangeKey *ikey  `json:"sr,omitempty"`
	LargestRangeKey  *ikey  `json:"lr,omitempty"`
	Level            uint8  `json:"lv"`
	Size             uint64 `json:"n"`
}

type ikey struct {
	Key     []byte `json:"k"`
	Trailer uint64 `json:"t"`
}

func toIkey(k pebble.InternalKey) ikey {
	return ikey{Key: bytes.Clone(k.UserKey), Trailer: uint64(k.Trailer)}
}

func (k ikey) internal() pebble.InternalKey {
	return pebble.InternalKey{UserKey: k.Key, Trailer: pebble.InternalKeyTrailer(k.Trailer)}
}

// backingBytes is a RemoteObjectBackingHandle over a backing received from
// another engine.
type backingBytes []byte

func (b backingBytes) Get() (objstorage.RemoteObjectBacking, error) {
	return objstorage.RemoteObjectBacking(b), nil
}
func (backingBytes) Close() {}

func (r *sharedRef) meta() pebble.SharedSSTMeta {
	m := pebble.SharedSSTMeta{
		Backing:          backingBytes(r.Backing),
		Smallest:         r.Smallest.internal(),
		Largest:          r.Largest.internal(),
		SmallestPointKey: r.SmallestPoint.internal(),
		LargestPointKey:  r.LargestPoint.internal(),
		Level:            r.Level,
		Size:             r.Size,
	}
	if r.SmallestRangeKey != nil && r.LargestRangeKey != nil {
		m.SmallestRangeKey = r.SmallestRangeKey.internal()
		m.LargestRangeKey = r.LargestRangeKey.internal()
	}
	return m
}

// spanHeader is the encoded export's header.
type spanHeader struct {
	Instance string            `json:"instance"`
	Table    string            `json:"table"`
	TableID  uint64            `json:"table_id"`
	Families map[string]uint32 `json:"families"`
	StartRow []byte            `json:"start_row"`
	EndRow   []byte            `json:"end_row"`
	Shared   []sharedRef       `json:"shared"`
	Stats    SpanStats         `json:"stats"`
}

// spanMagic starts an encoded export: version 1 is the magic, a uvarint
// header length, the JSON header, a uvarint agenda length, the agenda
// entries (each a zigzag varint of its due time less the previous one's,
// a uvarint row length and the row), then the local SSTable's bytes.
const spanMagic = "ebbspan1"

func encodeAgenda(dst []byte, entries []AgendaEntry) []byte {
	var prev int64
	for _, a := range entries {
		dst = binary.AppendVarint(dst, a.Due-prev)
		dst = binary.AppendUvarint(dst, uint64(len(a.Row)))
		dst = append(dst, a.Row...)
		prev = a.Due
	}
	return dst
}

func decodeAgenda(b []byte) ([]AgendaEntry, error) {
	var out []AgendaEntry
	var prev int64
	for len(b) > 0 {
		d, k := binary.Varint(b)
		if k <= 0 {
			return nil, fmt.Errorf("%w: span export: bad agenda entry", ErrInvalid)
		}
		b = b[k:]
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, fmt.Errorf("%w: span export: bad agenda entry", ErrInvalid)
		}
		prev += d
		out = append(out, AgendaEntry{Due: prev, Row: bytes.Clone(b[k : k+int(n)])})
		b = b[k+int(n):]
	}
	return out, nil
}

// uvarintChunk reads a uvarint length and that many bytes.
func uvarintChunk(b []byte) (chunk, rest []byte, ok bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, nil, false
	}
	return b[k : k+int(n)], b[k+int(n):], true
}

// Marshal encodes the export for the target. It holds references, not the
// shared SSTables' data: the target must reach the same object store, and
// the source must not Release the export before the target has ingested.
func (x *SpanExport) Marshal() ([]byte, error) {
	if x.encoded != nil {
		return x.encoded, nil
	}
	return x.encode()
}

func (x *SpanExport) encode() ([]byte, error) {
	h := spanHeader{Instance: x.Instance, Table: x.Table, TableID: x.TableID, Families: x.Families,
		StartRow: x.StartRow, EndRow: x.EndRow, Shared: x.shared, Stats: x.stats}
	hb, err := json.Marshal(&h)
	if err != nil {
		return nil, fmt.Errorf("ebbtable: encode span export: %w", err)
	}
	ab := encodeAgenda(nil, x.agenda)
	out := make([]byte, 0, len(spanMagic)+2*binary.MaxVarintLen64+len(hb)+len(ab)+len(x.local))
	out = append(out, spanMagic...)
	out = binary.AppendUvarint(out, uint64(len(hb)))
	out = append(out, hb...)
	out = binary.AppendUvarint(out, uint64(len(ab)))
	out = append(out, ab...)
	return append(out, x.local...), nil
}

// UnmarshalSpanExport decodes an export made by Marshal.
func UnmarshalSpanExport(b []byte) (*SpanExport, error) {
	if !bytes.HasPrefix(b, []byte(spanMagic)) {
		return nil, fmt.Errorf("%w: not a span export", ErrInvalid)
	}
	hb, rest, ok := uvarintChunk(b[len(spanMagic):])
	if !ok {
		return nil, fmt.Errorf("%w: span export: truncated header", ErrInvalid)
	}
	var h spanHeader
	if err := json.Unmarshal(hb, &h); err != nil {
		return nil, fmt.Errorf("%w: span export header: %w", ErrInvalid, err)
	}
	ab, local, ok := uvarintChunk(rest)
	if !ok {
		return nil, fmt.Errorf("%w: span export: truncated agenda", ErrInvalid)
	}
	agenda, err := decodeAgenda(ab)
	if err != nil {
		return nil, err
	}
	x := &SpanExport{Instance: h.Instance, Table: h.Table, TableID: h.TableID, Families: h.Families,
		StartRow: h.StartRow, EndRow: h.EndRow, shared: h.Shared, stats: h.Stats, agenda: agenda, encoded: b}
	if len(local) > 0 {
		x.local = local
	}
	if int64(len(x.local)) != h.Stats.LocalBytes || len(agenda) != h.Stats.AgendaEntries || int64(len(b)) != h.Stats.Encoded {
		return nil, fmt.Errorf("%w: span export: truncated or damaged (sizes disagree with its header)", ErrInvalid)
	}
	if x.TableID == 0 || (len(x.EndRow) > 0 && bytes.Compare(x.StartRow, x.EndRow) >= 0) {
		return nil, fmt.Errorf("%w: span export: bad table id or row range", ErrInvalid)
	}
	return x, nil
}

// spanBounds are the cell keys of rows [start, end) of table id.
func spanBounds(id uint64, start, end []byte) (lo, hi []byte, err error) {
	if len(end) > 0 && bytes.Compare(start, end) >= 0 {
		return nil, nil, fmt.Errorf("%w: empty row range [%q, %q)", ErrInvalid, start, end)
	}
	lo = storage.RowBound(id, start)
	if len(end) == 0 {
		return lo, storage.TableEnd(id), nil
	}
	return lo, storage.RowBound(id, end), nil
}

func inRows(row, start, end []byte) bool {
	return bytes.Compare(row, start) >= 0 && (len(end) == 0 || bytes.Compare(row, end) < 0)
}

// MoveStats are an engine's running totals of span moves, for metrics.
type MoveStats struct {
	Exports, Ingests, Excises int64
	// BytesShipped sums the exports' encoded sizes (what travels).
	BytesShipped int64
	// LocalKeysShipped sums the keys exports copied from local levels.
	LocalKeysShipped int64
	// SharedSSTsReferenced sums the shared SSTables exports referenced.
	SharedSSTsReferenced int64
}

type moveCounters struct {
	exports, ingests, excises, bytes, keys, shared atomic.Int64
}

// MoveStats returns the engine's span-move totals since it opened.
func (e *Engine) MoveStats() MoveStats {
	c := &e.moves
	return MoveStats{Exports: c.exports.Load(), Ingests: c.ingests.Load(), Excises: c.excises.Load(),
		BytesShipped: c.bytes.Load(), LocalKeysShipped: c.keys.Load(), SharedSSTsReferenced: c.shared.Load()}
}

// ExportSpan takes rows [startRow, endRow) of a table (empty endRow: to its
// end) for IngestSpan on another engine: references to the span's shared
// SSTables, the keys still in local levels, the rows' GC agenda entries. It
// reads one consistent view and changes nothing; writes after it are not in
// it, so the caller fences the span first. Without shared storage every
// key is copied (a move that works, but ships everything). The caller
// must Release the export.
func (e *Engine) ExportSpan(ctx context.Context, instance, name string, startRow, endRow []byte) (*SpanExport, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	m, err := e.Table(instance, name)
	if err != nil {
		return nil, err
	}
	x, err := e.exportSpan(ctx, m, instance, name, startRow, endRow, true)
	if err != nil {
		return nil, err
	}
	e.moves.exports.Add(1)
	e.moves.bytes.Add(x.stats.Encoded)
	e.moves.keys.Add(x.stats.LocalKeys)
	e.moves.shared.Add(int64(x.stats.SharedSSTs))
	return x, nil
}

// exportSpan reads rows [startRow, endRow) of table m (its name on this
// engine is instance/name) into an export, with the rows' GC agenda
// entries when agenda is set.
func (e *Engine) exportSpan(ctx context.Context, m *Meta, instance, name string, startRow, endRow []byte, agenda bool) (*SpanExport, error) {
	lo, hi, err := spanBounds(m.ID, startRow, endRow)
	if err != nil {
		return nil, err
	}
	x := &SpanExport{Instance: instance, Table: name, TableID: m.ID, Families: map[string]uint32{},
		StartRow: bytes.Clone(startRow), EndRow: bytes.Clone(endRow)}
	for _, f := range m.Families {
		x.Families[f.Name] = f.ID
	}
	ok := false
	defer func() {
		if !ok {
			x.Release()
		}
	}()
	// Agenda entries first: one written after this scan and before the
	// span's keys are read would only make the target judge a row once
	// more.
	if agenda {
		if err := e.agendaDue(m, 1<<63-1, func(en AgendaEntry) bool {
			if inRows(en.Row, startRow, endRow) {
				x.agenda = append(x.agenda, AgendaEntry{Due: en.Due, Row: bytes.Clone(en.Row)})
			}
			return true
		}); err != nil {
			return nil, err
		}
	}
	x.stats.AgendaEntries = len(x.agenda)

	// Read at a moment with no commit in flight, so the export and its
	// commit high-water agree (CommitHighWater).
	var snap *pebble.Snapshot
	if !e.seq.quiet(ctx.Done(), func(last int64) { snap, x.commitHigh = e.store.NewSnapshot(), last }) {
		return nil, fmt.Errorf("ebbtable: export span of %s: %w", name, ctx.Err())
	}
	defer snap.Close()
	err = e.scanSpan(ctx, snap, x, lo, hi, e.store.Shared())
	if errors.Is(err, pebble.ErrInvalidSkipSharedIteration) {
		// Lower-level SSTables written before shared storage was on
		// stay local until compacted again: copy the span whole.
		x.Release()
		x.handles, x.shared = nil, nil
		x.stats = SpanStats{AgendaEntries: len(x.agenda)}
		err = e.scanSpan(ctx, snap, x, lo, hi, false)
	}
	if err != nil {
		return nil, fmt.Errorf("ebbtable: export span of %s: %w", name, err)
	}
	// The encoded length goes into the header it is part of: settle it by
	// encoding until it stops changing (a digit more at most).
	for i := 0; i < 3; i++ {
		enc, err := x.encode()
		if err != nil {
			return nil, err
		}
		if int64(len(enc)) == x.stats.Encoded {
			x.encoded = enc
			break
		}
		x.stats.Encoded = int64(len(enc))
	}
	if x.encoded == nil {
		return nil, errors.New("ebbtable: export span: encoded size does not settle")
	}
	ok = true
	return x, nil
}

// scanSpan reads keys [lo, hi) of snap into x: shared SSTables as
// references (when shared), every other key into x.local.
func (e *Engine) scanSpan(ctx context.Context, snap *pebble.Snapshot, x *SpanExport, lo, hi []byte, shared bool) error {
	mem := vfs.NewMem()
	f, err := mem.Create("local.sst", vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), e.store.SSTWriterOptions())
	wclosed := false
	defer func() {
		if !wclosed {
			w.Close()
		}
	}()
	var visitShared func(*pebble.SharedSSTMeta) error
	if shared {
		visitShared = func(s *pebble.SharedSSTMeta) error {
			b, err := s.Backing.Get()
			if err != nil {
				return err
			}
			x.handles = append(x.handles, s.Backing)
			r := sharedRef{Backing: bytes.Clone(b), Smallest: toIkey(s.Smallest), Largest: toIkey(s.Largest),
				SmallestPoint: toIkey(s.SmallestPointKey), LargestPoint: toIkey(s.LargestPointKey), Level: s.Level, Size: s.Size}
			if s.LargestRangeKey.UserKey != nil {
				sr, lr := toIkey(s.SmallestRangeKey), toIkey(s.LargestRangeKey)
				r.SmallestRangeKey, r.LargestRangeKey = &sr, &lr
			}
			x.shared = append(x.shared, r)
			x.stats.SharedSSTs++
			x.stats.SharedBytes += s.Size
			return nil
		}
	}
	err = snap.ScanInternal(ctx, block.CategoryUnknown, lo, hi,
		func(k *pebble.InternalKey, v pebble.LazyValue, _ pebble.IteratorLevel) error {
			x.stats.LocalKeys++
			switch k.Kind() {
			case pebble.InternalKeyKindSet, pebble.InternalKeyKindSetWithDelete:
				val, _, err := v.Value(nil)
				if err != nil {
					return err
				}
				return w.Set(k.UserKey, val)
			case pebble.InternalKeyKindDelete, pebble.InternalKeyKindSingleDelete, pebble.InternalKeyKindDeleteSized:
				return w.Delete(k.UserKey)
			case pebble.InternalKeyKindMerge:
				val, _, err := v.Value(nil)
				if err != nil {
					return err
				}
				return w.Merge(k.UserKey, val)
			}
			return fmt.Errorf("unexpected key kind %s", k.Kind())
		},
		func(start, end []byte, _ pebble.SeqNum) error {
			x.stats.LocalKeys++
			return w.DeleteRange(clampKey(start, lo, hi), clampKey(end, lo, hi))
		},
		func(_, _ []byte, keys []rangekey.Key) error {
			// ebbtable writes no range keys; an ingest with an excise that
			// overlapped the memtable leaves a range-key deletion over
			// the excised span (with a range deletion, copied above)
			// until it is flushed. Deleting range keys that do not exist
			// changes nothing, so it need not travel.
			for _, k := range keys {
				if k.Kind() != pebble.InternalKeyKindRangeKeyDelete {
					return errors.New("range keys are not expected")
				}
			}
			return nil
		},
		visitShared, nil)
	if err != nil {
		return err
	}
	wclosed = true
	if err := w.Close(); err != nil {
		return err
	}
	x.local, x.stats.LocalBytes = nil, 0
	if x.stats.LocalKeys > 0 {
		local, err := readMemFile(mem, "local.sst")
		if err != nil {
			return err
		}
		x.local = local
		x.stats.LocalBytes = int64(len(local))
	}
	return nil
}

func clampKey(k, lo, hi []byte) []byte {
	if bytes.Compare(k, lo) < 0 {
		return lo
	}
	if bytes.Compare(k, hi) > 0 {
		return hi
	}
	return k
}

func readMemFile(fs vfs.FS, name string) ([]byte, error) {
	f, err := fs.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// IngestSpan installs an export from another engine: in one atomic step it
// removes whatever this engine holds in the span's cell keys, attaches the
// shared SSTables and adds the local keys; the rows' agenda entries are
// written first, and the collector sweeps the table whole on its next pass
// (so cells of the span that expire are collected within one GC interval
// of the move, or of their expiry). The table must exist here under the
// export's table id, with every exported family under the same id
// (ErrPrecondition otherwise); exports with shared SSTables need this
// engine on the same object store. Ingesting the same export again is
// harmless. The export holds neither the span's change-stream records nor
// its replication tombstones: a cluster move ships them beside it
// (IngestChanges, and SpanTombstones into PutTombstones; docs/scale-out.md).
func (e *Engine) IngestSpan(ctx context.Context, x *SpanExport) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	m, err := e.Table(x.Instance, x.Table)
	if err != nil {
		return err
	}
	if m.ID != x.TableID {
		return fmt.Errorf("%w: table %s has id %d here and %d at the span's source; a cluster creates tables with one id everywhere (TableSpec.ID)", ErrPrecondition, x.Table, m.ID, x.TableID)
	}
	for fam, id := range x.Families {
		f, ok := m.Family(fam)
		if !ok {
			return fmt.Errorf("%w: family %s of table %s exists at the span's source, not here", ErrPrecondition, fam, x.Table)
		}
		if f.ID != id {
			return fmt.Errorf("%w: family %s of table %s has id %d here and %d at the span's source", ErrPrecondition, fam, x.Table, f.ID, id)
		}
	}
	if len(x.shared) > 0 && !e.store.Shared() {
		return fmt.Errorf("%w: the span references shared SSTables and this engine has no shared storage", ErrPrecondition)
	}
	lo, hi, err := spanBounds(m.ID, x.StartRow, x.EndRow)
	if err != nil {
		return err
	}
	if len(x.agenda) > 0 {
		b := e.store.NewBatch()
		for _, a := range x.agenda {
			if err := b.Set(storage.AgendaKey(m.ID, a.Due, a.Row), nil, nil); err != nil {
				b.Close()
				return err
			}
		}
		err := e.commit(b)
		b.Close()
		if err != nil {
			return err
		}
	}
	var paths []string
	if len(x.local) > 0 {
		p, remove, err := e.store.WriteTempSST(x.local)
		if err != nil {
			return err
		}
		defer remove()
		paths = append(paths, p)
	}
	shared := make([]pebble.SharedSSTMeta, len(x.shared))
	for i := range x.shared {
		shared[i] = x.shared[i].meta()
	}
	if _, err := e.store.IngestAndExcise(ctx, paths, shared, nil, pebble.KeyRange{Start: lo, End: hi}); err != nil {
		return fmt.Errorf("ebbtable: ingest span of %s: %w", x.Table, err)
	}
	e.gcGen.bump(m.ID)
	e.moves.ingests.Add(1)
	return nil
}

// ExciseSpan removes rows [startRow, endRow) of a table (empty endRow: to
// its end) from this engine, and their agenda entries: the source's last
// step of a move, once the target owns the span. Shared SSTables lose this
// engine's reference only; they are deleted from the object store once no
// engine references them. Durable when it returns.
func (e *Engine) ExciseSpan(ctx context.Context, instance, name string, startRow, endRow []byte) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	m, err := e.Table(instance, name)
	if err != nil {
		return err
	}
	lo, hi, err := spanBounds(m.ID, startRow, endRow)
	if err != nil {
		return err
	}
	if err := e.store.Excise(ctx, pebble.KeyRange{Start: lo, End: hi}); err != nil {
		return fmt.Errorf("ebbtable: excise span of %s: %w", name, err)
	}
	// The agenda entries of the rows go after: left behind by a crash,
	// they only make the collector judge rows it finds empty.
	b := e.store.NewBatch()
	defer b.Close()
	n := 0
	if err := e.agendaDue(m, 1<<63-1, func(en AgendaEntry) bool {
		if inRows(en.Row, startRow, endRow) {
			b.Delete(storage.AgendaKey(m.ID, en.Due, en.Row), nil)
			n++
		}
		return true
	}); err != nil {
		return err
	}
	if n > 0 {
		if err := e.commitUngated(b, pebble.Sync); err != nil {
			return err
		}
	}
	e.moves.excises.Add(1)
	return nil
}

// ApproxSpanSize estimates the bytes rows [startRow, endRow) of a table
// take in SSTables, local and shared (memtables count nothing until
// flushed): the measure for size-based splits.
func (e *Engine) ApproxSpanSize(instance, name string, startRow, endRow []byte) (uint64, error) {
	if err := e.enter(); err != nil {
		return 0, err
	}
	defer e.leave()
	m, err := e.Table(instance, name)
	if err != nil {
		return 0, err
	}
	lo, hi, err := spanBounds(m.ID, startRow, endRow)
	if err != nil {
		return 0, err
	}
	return e.store.EstimateDiskUsage(lo, hi)
}

// SpanSplitKey returns a row key k in (startRow, endRow) splitting the rows
// into [startRow, k) and [k, endRow) of about equal size, for size-based
// splits; nil when the span holds fewer than two rows. Candidates are the
// rows at SSTable boundaries, judged by ApproxSpanSize; when none falls
// inside the span (it lies within one SSTable, or only in memtables) the
// span's keys are read and measured.
func (e *Engine) SpanSplitKey(ctx context.Context, instance, name string, startRow, endRow []byte) ([]byte, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	m, err := e.Table(instance, name)
	if err != nil {
		return nil, err
	}
	lo, hi, err := spanBounds(m.ID, startRow, endRow)
	if err != nil {
		return nil, err
	}
	total, err := e.store.EstimateDiskUsage(lo, hi)
	if err != nil {
		return nil, err
	}
	levels, err := e.store.SSTables()
	if err != nil {
		return nil, err
	}
	var best []byte
	var bestGap uint64
	for _, level := range levels {
		for _, t := range level {
			for _, k := range [][]byte{t.Smallest.UserKey, t.Largest.UserKey} {
				if bytes.Compare(k, lo) <= 0 || bytes.Compare(k, hi) >= 0 {
					continue
				}
				row, err := storage.DecodeRowKey(k[:storage.RowKeyLen(k)])
				if err != nil || !inRows(row, startRow, endRow) || bytes.Equal(row, startRow) {
					continue
				}
				n, err := e.store.EstimateDiskUsage(lo, storage.RowBound(m.ID, row))
				if err != nil {
					return nil, err
				}
				gap := max(n, total/2) - min(n, total/2)
				if best == nil || gap < bestGap {
					best, bestGap = row, gap
				}
			}
		}
	}
	if best != nil && bestGap < total/4 {
		return best, nil
	}
	return e.measuredSplit(ctx, lo, hi)
}

// measuredSplit reads keys [lo, hi) and returns the row at which half of
// their bytes lie before it; nil for fewer than two rows.
func (e *Engine) measuredSplit(ctx context.Context, lo, hi []byte) ([]byte, error) {
	it, err := e.store.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	type rowSize struct {
		prefix []byte
		end    int64 // bytes up to and including this row
	}
	var rows []rowSize
	var sum int64
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		p := k[:storage.RowKeyLen(k)]
		sum += int64(len(k) + len(it.Value()))
		if n := len(rows); n > 0 && bytes.Equal(rows[n-1].prefix, p) {
			rows[n-1].end = sum
			continue
		}
		rows = append(rows, rowSize{prefix: bytes.Clone(p), end: sum})
	}
	if err := it.Error(); err != nil {
		return nil, err
	}
	if len(rows) < 2 {
		return nil, nil
	}
	i := 1
	for i < len(rows)-1 && rows[i-1].end < sum/2 {
		i++
	}
	return storage.DecodeRowKey(rows[i].prefix)
}

// SpanDiskUsage splits ApproxSpanSize into the bytes of SSTables on the
// local disk (L0–L4, and lower levels written before shared storage was
// on) and in the shared store: what a move of the span ships is about the
// local part, plus what is still in memtables.
func (e *Engine) SpanDiskUsage(instance, name string, startRow, endRow []byte) (local, shared uint64, err error) {
	if err := e.enter(); err != nil {
		return 0, 0, err
	}
	defer e.leave()
	m, err := e.Table(instance, name)
	if err != nil {
		return 0, 0, err
	}
	lo, hi, err := spanBounds(m.ID, startRow, endRow)
	if err != nil {
		return 0, 0, err
	}
	total, remote, external, err := e.store.EstimateDiskUsageByBackingType(lo, hi)
	if err != nil {
		return 0, 0, err
	}
	shared = remote - min(external, remote)
	return total - min(remote, total), shared, nil
}
