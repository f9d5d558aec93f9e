package table

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/filter"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/storage"
)

// RowFilter narrows the cells of a row; the filter package's compiled
// programs satisfy it. A nil RowFilter passes every cell.
type RowFilter interface {
	Apply(cell.Row) cell.Row
}

// headFilter is a RowFilter with a head a scan may run while it streams
// cells (filter.Program.Head says which filters and why that returns the
// same rows).
type headFilter interface {
	Head() *filter.Head
}

// RowRange is a range of row keys. A nil Start starts at the first row; a
// nil End runs to the last.
type RowRange struct {
	Start     []byte
	StartOpen bool
	End       []byte
	EndClosed bool
}

// ReadRequest says which rows to read and how.
type ReadRequest struct {
	// Keys and Ranges select rows; both empty means the whole table.
	Keys   [][]byte
	Ranges []RowRange
	Filter RowFilter
	// Limit caps the number of rows returned; 0 means no limit.
	Limit    int64
	Reversed bool
	// Stats, when not nil, is filled with what the read examined.
	Stats *ReadStats
	// IgnoreRowPolicy returns rows the table's row deletion policy has
	// expired (the row deletion job reads them so).
	IgnoreRowPolicy bool
	// Transient says the caller keeps nothing of the rows it is handed
	// once ReadRows has returned (it copies what it needs, as the server's
	// response encoding does): a point read may then carve its first row
	// from memory the next point read reuses (pointScratch). Rows stay
	// intact until ReadRows returns, whatever this says.
	Transient bool
	// MaxRowBytes bounds the memory the cells one row selects hold
	// (values, qualifiers and cellBytes a cell) before the filter program
	// runs; a row past it fails the read with ErrRowTooLarge. 0 means
	// DefaultMaxRowBytes.
	MaxRowBytes int64
}

// DefaultMaxRowBytes is the most a read selects from one row: 256 MiB, the
// size of row Bigtable refuses to return whole.
const DefaultMaxRowBytes = 256 << 20

// ErrRowTooLarge is the error of a read that selected more of one row than
// ReadRequest.MaxRowBytes; it wraps ErrPrecondition (FAILED_PRECONDITION,
// as Bigtable answers).
var ErrRowTooLarge = fmt.Errorf("%w: row too large", ErrPrecondition)

// ReadStats counts what a read examined and returned. RowsSeen counts the
// rows the scan met (rows whose every cell is hidden included); CellsSeen
// the cell keys it stepped on: cells returned or dropped by the filter,
// hidden versions it judged, and the few it stepped over before seeking
// past the rest of a column. Cells skipped by a seek — the hidden tail of
// a column, or what the filter's head (filter.Head: leading limits and
// family, qualifier and timestamp tests) turns away — are not seen.
type ReadStats struct {
	RowsSeen, RowsReturned   int64
	CellsSeen, CellsReturned int64
}

// interval is [lo, hi) in raw row-key order; hi nil means unbounded. one
// marks the interval of the single row lo (hi is then nil; see bounds).
type interval struct {
	lo, hi []byte
	one    bool
}

func keySucc(k []byte) []byte { return append(bytes.Clone(k), 0) }

// intervals turns keys and ranges into sorted, disjoint row-key intervals.
func (r *ReadRequest) intervals() ([]interval, error) {
	if len(r.Keys) == 0 && len(r.Ranges) == 0 {
		return []interval{{lo: []byte{}}}, nil
	}
	var ivs []interval
	for _, k := range r.Keys {
		ivs = append(ivs, interval{lo: k, hi: keySucc(k)})
	}
	for _, rg := range r.Ranges {
		iv := interval{lo: rg.Start, hi: rg.End}
		if iv.lo == nil {
			iv.lo = []byte{}
		}
		if rg.StartOpen {
			iv.lo = keySucc(rg.Start)
		}
		if rg.EndClosed {
			iv.hi = keySucc(rg.End)
		}
		if iv.hi != nil && bytes.Compare(iv.lo, iv.hi) > 0 {
			return nil, fmt.Errorf("%w: row range starts after it ends (%q > %q)", ErrInvalid, rg.Start, rg.End)
		}
		if iv.hi != nil && bytes.Equal(iv.lo, iv.hi) {
			continue
		}
		ivs = append(ivs, iv)
	}
	slices.SortFunc(ivs, func(a, b interval) int { return bytes.Compare(a.lo, b.lo) })
	var out []interval
	for _, iv := range ivs {
		if n := len(out); n > 0 {
			last := &out[n-1]
			if last.hi == nil || bytes.Compare(iv.lo, last.hi) <= 0 {
				if last.hi != nil && (iv.hi == nil || bytes.Compare(iv.hi, last.hi) > 0) {
					last.hi = iv.hi
				}
				continue
			}
		}
		out = append(out, iv)
	}
	return out, nil
}

// ReadRows streams the selected rows, in key order (or reversed), each a
// consistent snapshot, after hiding expired cells and applying the filter.
// Rows left with no cells are skipped and do not count toward the limit.
func (e *Engine) ReadRows(ctx context.Context, instance, table string, req ReadRequest, fn func(cell.Row) error) error {
	return readError(e.readRows(ctx, instance, table, req, fn))
}

// readError names corruption met by a read: ErrDataLoss, with the file.
func readError(err error) error {
	if err == nil || !pebble.IsCorruptionError(err) {
		return err
	}
	if info := pebble.ExtractDataCorruptionInfo(err); info != nil {
		return fmt.Errorf("%w in %s: %v", ErrDataLoss, info.Path, err)
	}
	return fmt.Errorf("%w: %v", ErrDataLoss, err)
}

func (e *Engine) readRows(ctx context.Context, instance, table string, req ReadRequest, fn func(cell.Row) error) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	m, err := e.Table(instance, table)
	if err != nil {
		return err
	}
	if req.Limit < 0 {
		return fmt.Errorf("%w: rows limit must not be negative", ErrInvalid)
	}
	// A point read may skip the new cells of writes in flight instead of
	// waiting for them (durability).
	point := len(req.Ranges) == 0 && len(req.Keys) > 0
	var one [1]interval
	ivs, err := req.pointIntervals(point, &one) // readpoint.go
	if err != nil {
		return err
	}
	var skip *skipKeys
	var opts *pebble.IterOptions
	if point {
		if skip = e.readSkip(); skip != nil {
			opts = skip.iterOptions()
		}
	}
	var it *pebble.Iterator
	var bbuf []byte           // where the bounds are written (see interval.bounds)
	var scratch *pointScratch // the pooled iterator's, for a transient read
	if point && opts == nil {
		// A point read takes a pooled iterator that sees the latest
		// state, or opens one, and gives it back (readiter.go).
		pi, err := e.pointIter()
		if err != nil {
			return err
		}
		it = pi.it
		if pi.scratch != nil {
			bbuf = pi.scratch.bounds[:0]
			if req.Transient {
				scratch = pi.scratch
			}
		}
		defer e.putIter(pi)
	} else {
		if it, err = e.store.NewIter(opts); err != nil {
			return err
		}
		defer it.Close()
	}
	// Nothing is returned that a write still waiting for its sync touched:
	// a point read waits for writes to its rows (or skips their new cells),
	// a range read for writes to its table (a row missing from the range
	// may be one an unsynced write deleted).
	g := e.gate(skip)
	if point {
		for _, k := range req.Keys {
			if err := g.row(ctx, m.ID, k); err != nil {
				return err
			}
		}
	} else if err := g.table(ctx, m.ID); err != nil {
		return err
	}
	s := scanner{e: e, m: m, it: it, now: e.nowMicros(), ctx: ctx, maxRow: req.MaxRowBytes, point: point}
	if scratch != nil {
		s.arena, s.cells = scratch.arena[:0], scratch.cells[:0]
		defer scratch.keep(&s)
	}
	if s.maxRow <= 0 {
		s.maxRow = DefaultMaxRowBytes
	}
	// The filter's head runs while streaming unless the row deletion
	// policy may judge the row: it reads the row's visible cells, which the
	// head could cut.
	if hf, ok := req.Filter.(headFilter); ok && !req.Reversed && (req.IgnoreRowPolicy || !e.rowPolicyApplies(m)) {
		s.head = hf.Head()
	}
	var sent int64
	stats := req.Stats
	if stats == nil {
		stats = &ReadStats{}
	}
	defer func() { stats.CellsSeen += s.seen }()
	emit := func(row cell.Row) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		stats.RowsSeen++
		if !req.IgnoreRowPolicy && e.rowHidden(m, row, s.now) {
			return nil
		}
		if req.Filter != nil && len(row.Cells) > 0 {
			row = req.Filter.Apply(row)
		}
		if len(row.Cells) == 0 {
			return nil
		}
		if err := fn(row); err != nil {
			return err
		}
		stats.RowsReturned++
		stats.CellsReturned += int64(len(row.Cells))
		sent++
		if req.Limit > 0 && sent >= req.Limit {
			return errStop
		}
		return nil
	}
	if req.Reversed {
		slices.Reverse(ivs)
	}
	for _, iv := range ivs {
		lo, hi := iv.bounds(bbuf, m.ID)
		it.SetBounds(lo, hi)
		if req.Reversed {
			err = s.scanBackward(emit)
		} else {
			err = s.scanForward(emit)
		}
		if err == errStop {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// scanner turns cell keys from an iterator into rows of the cells readers
// may see: cells past their native expiry never, and, in HideEligible mode,
// no cell its family's GC rule makes eligible now (the cells
// ColumnEligibility marks Keep).
//
// A forward scan judges each cell as it meets it, in key order (a column's
// versions newest first), and never decodes or copies a hidden one. It also
// skips what cannot be returned without stepping on it: once the family
// rule makes the column's next version eligible whatever it holds, the rest
// of the column goes by a seek (see skipColumn), and so does a column or
// the rest of a row that the filter's head (head) turns away.
//
// A backward scan meets a column's versions oldest first, before the ones
// that decide their positions, so it gathers each row and judges it at the
// end (visible), as every scan did before — except that a column of more
// than a few versions under a rule is judged forward from its newest
// version (columnForward), so its hidden tail is skipped there too.
type scanner struct {
	e   *Engine
	m   *Meta
	it  *pebble.Iterator
	now int64

	// head is the filter's head (filter.Head), run while streaming: on
	// forward scans only, and only where the row deletion policy cannot
	// look at the row (it reads cells the head would drop). nil: none.
	head *filter.Head

	// seen counts the keys the scanner stepped on: the cells it returned,
	// the hidden ones it judged and the few it stepped over before a skip
	// seeks. Versions skipped by a seek are not counted.
	seen int64

	// Rows handed out keep what they point into, so these are only ever
	// appended to or replaced, never overwritten: values are carved from
	// a shared chunk, and a column's versions share one decoded qualifier.
	arena           []byte
	lastQEnc, lastQ []byte
	// cells, when not nil, is room for the first row's cells
	// (pointScratch); newRow takes it once.
	cells []cell.Cell
	// point: the read names row keys only (a few rows), so row keys and
	// qualifiers are carved from the value chunk too. A scan's rows keep
	// their own (a caller keeping only the keys of many rows must not keep
	// their values' chunks).
	point bool

	seekBuf []byte // the key a skip seeks to
	sought  bool   // skipColumn sought past the column (it held more than its steps)

	// ctx, when set, is looked at every ctxEvery keys, so a read of a
	// long row ends soon after its caller goes away.
	ctx context.Context
	// maxRow bounds rowBytes, the bytes of the cells the current row
	// selected; 0: no bound.
	maxRow, rowBytes int64
	rowKey           []byte
}

// ctxEvery is how many keys a scan steps on between looks at its context.
const ctxEvery = 1024

// step counts a key the scan stepped on, and now and then looks at the
// context: a row of a million versions is cancelled inside it.
func (s *scanner) step() error {
	s.seen++
	if s.ctx != nil && s.seen%ctxEvery == 0 {
		return s.ctx.Err()
	}
	return nil
}

// keep counts a selected cell against the row bound.
func (s *scanner) keep(c *cell.Cell) error { return s.keepBytes(len(c.Value) + len(c.Qualifier)) }

// cellBytes is what a selected cell holds in memory besides its value and
// qualifier (the cell.Cell itself), so a row of many tiny cells counts too.
const cellBytes = int(unsafe.Sizeof(cell.Cell{}))

// keepBytes counts a selected cell of n value and qualifier bytes against
// the row bound.
func (s *scanner) keepBytes(n int) error {
	s.rowBytes += int64(n + cellBytes)
	if s.maxRow > 0 && s.rowBytes > s.maxRow {
		return fmt.Errorf("%w: the cells selected from row %q pass %d MiB; read it in parts: a column range or qualifier filter per call, CellsPerColumnLimit, a timestamp range, or StripValue to list the cells first", ErrRowTooLarge, s.rowKey, s.maxRow>>20)
	}
	return nil
}

// copyValue returns v copied into the scanner's value chunk.
func (s *scanner) copyValue(v []byte) []byte {
	if len(v) == 0 {
		return []byte{}
	}
	if !s.reserve(len(v)) {
		return bytes.Clone(v)
	}
	start := len(s.arena)
	s.arena = append(s.arena, v...)
	return s.arena[start:len(s.arena):len(s.arena)]
}

// reserve makes room for n more bytes in the value chunk, starting a new
// chunk if need be, unless n is over 2 KiB (false: such a piece gets an
// allocation of its own).
func (s *scanner) reserve(n int) bool {
	if cap(s.arena)-len(s.arena) >= n {
		return true
	}
	if n > 2<<10 {
		return false
	}
	// Chunks start small (a point read of a few cells: the first holds
	// this value and a little more, not four of it) and double.
	s.arena = make([]byte, 0, min(max(2*cap(s.arena), n+n/4, 256), 8<<10))
	return true
}

// carved returns what the chunk gained since start (a piece appended to it
// within its capacity), capped there, and keeps it in the chunk.
func (s *scanner) carved(grown []byte, start int) []byte {
	s.arena = grown
	return grown[start:len(grown):len(grown)]
}

// qualifier decodes an escaped qualifier, reusing the previous cell's when
// the encoding is the same (the versions of one column). A point read
// keeps both in its value chunk (point).
func (s *scanner) qualifier(enc []byte) ([]byte, error) {
	if s.lastQEnc != nil && bytes.Equal(enc, s.lastQEnc) {
		return s.lastQ, nil
	}
	if s.point && s.reserve(2*len(enc)) {
		start := len(s.arena)
		a, err := storage.AppendQualifier(s.arena, enc)
		if err != nil {
			return nil, err
		}
		q := s.carved(a, start)
		start = len(s.arena)
		s.lastQEnc, s.lastQ = s.carved(append(s.arena, enc...), start), q
		return q, nil
	}
	q, err := storage.DecodeQualifier(enc)
	if err != nil {
		return nil, err
	}
	s.lastQEnc, s.lastQ = append(s.lastQEnc[:0], enc...), q
	return q, nil
}

// decodeCell decodes the cell at the iterator, given the length of its row
// prefix. ok is false for cells of dropped families.
func (s *scanner) decodeCell(k []byte, rowLen int) (cell.Cell, bool, error) {
	rest := k[rowLen : len(k)-storage.SuffixLen]
	if len(rest) < 4 {
		return cell.Cell{}, false, fmt.Errorf("%w: %x", storage.ErrCorruptKey, k)
	}
	fam, ok := s.m.FamilyByID(binary.BigEndian.Uint32(rest))
	if !ok {
		return cell.Cell{}, false, nil
	}
	q, err := s.qualifier(rest[4:])
	if err != nil {
		return cell.Cell{}, false, err
	}
	v, err := s.it.ValueAndErr()
	if err != nil {
		return cell.Cell{}, false, err
	}
	data, exp, err := storage.DecodeValue(v)
	if err != nil {
		return cell.Cell{}, false, err
	}
	return cell.Cell{
		Family:    fam.Name,
		Qualifier: q,
		Timestamp: storage.DecodeSuffix(k[len(k)-storage.SuffixLen:]),
		Value:     s.copyValue(data),
		ExpireAt:  exp,
	}, true, nil
}

// newRow starts a row of the given row prefix, sized by the last rows read.
// A point read's row key goes in its value chunk (point).
func (s *scanner) newRow(prefix []byte) (cell.Row, error) {
	var key []byte
	if s.point && s.reserve(len(prefix)) {
		start := len(s.arena)
		a, err := storage.AppendRowKey(s.arena, prefix)
		if err != nil {
			return cell.Row{}, err
		}
		key = s.carved(a, start)
	} else {
		var err error
		if key, err = storage.DecodeRowKey(prefix); err != nil {
			return cell.Row{}, err
		}
	}
	s.rowBytes, s.rowKey = 0, key
	if s.cells != nil {
		cells := s.cells
		s.cells = nil // the next row's cells are its own
		return cell.Row{Key: key, Cells: cells}, nil
	}
	return cell.Row{Key: key, Cells: make([]cell.Cell, 0, max(s.e.cellsHint.Load(), 1))}, nil
}

func (s *scanner) hint(row cell.Row) {
	if n := int32(min(len(row.Cells), 64)); n != s.e.cellsHint.Load() {
		s.e.cellsHint.Store(n)
	}
}

// skipSteps is how many keys skipColumn steps over before it seeks: most
// columns hold few versions, and a step costs less than a seek. Tests set
// it to 0 to make every skip seek.
var skipSteps atomic.Int32

func init() { skipSteps.Store(3) }

// skipColumn moves the iterator past every version of the column col (a
// cell key without its suffix) and reports whether it is still valid. It
// steps a few keys and then seeks to the first key after the column, so a
// column of many versions costs a seek, not a walk. Column prefixes are
// prefix-free (the qualifier is escaped and terminated), so a key of col
// is one that starts with it.
//
// A column a read recently left with a seek (Engine.hot) gets one step
// before the seek, not skipSteps: a hot column's next versions are hidden
// ones the seek passes anyway. A column that ends within its steps is
// forgotten.
func (s *scanner) skipColumn(col []byte) bool {
	steps := skipSteps.Load()
	var (
		sum  uint64
		slot *atomic.Uint64
		hot  bool
	)
	if steps > 1 {
		sum, slot = s.e.hot.sum(col)
		if hot = slot.Load() == sum; hot {
			steps = 1
		}
	}
	for range steps {
		if !s.it.Next() {
			if hot {
				slot.CompareAndSwap(sum, 0)
			}
			return false
		}
		if !bytes.HasPrefix(s.it.Key(), col) {
			if hot {
				slot.CompareAndSwap(sum, 0)
			}
			return true
		}
		s.seen++
	}
	s.sought = true
	if slot != nil && !hot {
		slot.Store(sum)
	}
	// NextPrefix (the comparer's Split ends a cell key's prefix at its
	// column, and its ImmediateSuccessor is the column's end) moves only the
	// levels still inside the column, where a seek would reposition every
	// memtable and level of the LSM. Should it stop inside the column (a
	// comparer without that successor), the seek finishes the skip.
	if !s.it.NextPrefix() {
		return false
	}
	if !bytes.HasPrefix(s.it.Key(), col) {
		return true
	}
	return s.seekPast(col)
}

// seekPast seeks to the first key that does not start with prefix (a row
// or column prefix) and is after it.
func (s *scanner) seekPast(prefix []byte) bool {
	s.seekBuf = append(s.seekBuf[:0], prefix...)
	end := storage.PrefixEnd(s.seekBuf)
	if end == nil {
		for s.it.Next() {
		}
		return false
	}
	return s.it.SeekGE(end)
}

func (s *scanner) scanBackward(emit func(cell.Row) error) error {
	var (
		row    cell.Row
		prefix []byte
		col    []byte // the column's key (a cell key without its suffix)
		fam    *Family
		start  int // where the column's cells begin in row.Cells
		met    int // the column's versions met so far
		colBuf [64]byte
	)
	col = colBuf[:0]
	flush := func() error {
		slices.Reverse(row.Cells)
		s.hint(row)
		// Columns judged forward (below) are visible already, and
		// visible keeps what it kept: a rule that keeps a cell at a
		// position keeps it at any earlier one.
		row.Cells = s.e.visible(s.m, row.Cells, s.now)
		return emit(row)
	}
	backLimit := int(3 * skipSteps.Load())
	valid := s.it.Last()
	for valid {
		k := s.it.Key()
		if err := s.step(); err != nil {
			return err
		}
		n := storage.RowKeyLen(k)
		if prefix == nil || !bytes.Equal(prefix, k[:n]) {
			if prefix != nil {
				if err := flush(); err != nil {
					return err
				}
			}
			prefix = append(prefix[:0], k[:n]...)
			var err error
			if row, err = s.newRow(prefix); err != nil {
				return err
			}
			col = col[:0]
		}
		ck := k[:len(k)-storage.SuffixLen]
		if len(col) == 0 || !bytes.Equal(col, ck) {
			if len(ck) < n+4 {
				return fmt.Errorf("%w: %x", storage.ErrCorruptKey, k)
			}
			col = append(col[:0], ck...)
			start, met = len(row.Cells), 0
			fam, _ = s.m.FamilyByID(binary.BigEndian.Uint32(ck[n:]))
		}
		// Backward, a column's versions come oldest first, before the
		// newer ones that decide their positions. A column with more
		// than a few versions under a rule that hides some is judged
		// forward instead, from its newest version, skipping its hidden
		// tail, and the scan goes on before it.
		if met++; met > backLimit && fam != nil && s.e.vis == HideEligible && !fam.GC.IsNone() {
			row.Cells = row.Cells[:start]
			var err error
			if row.Cells, err = s.columnForward(row.Cells, col, n, fam); err != nil {
				return err
			}
			valid = s.it.SeekLT(col)
			continue
		}
		c, ok, err := s.decodeCell(k, n)
		if err != nil {
			return err
		}
		if ok {
			if err := s.keep(&c); err != nil {
				return err
			}
			row.Cells = append(row.Cells, c)
		}
		valid = s.it.Prev()
	}
	if err := s.it.Error(); err != nil {
		return err
	}
	if prefix != nil {
		return flush()
	}
	return nil
}

// columnForward appends to dst, oldest first (the order of a backward
// scan), the visible versions of the column col of family fam (HideEligible
// mode, a rule that is not None), judged from the newest as scanForward
// judges them and read up to the first version after which none can be
// visible. It leaves the iterator inside or just past the column.
func (s *scanner) columnForward(dst []cell.Cell, col []byte, rowLen int, fam *Family) ([]cell.Cell, error) {
	q, err := s.qualifier(col[rowLen+4:])
	if err != nil {
		return dst, err
	}
	first, pos := len(dst), 0
	for valid := s.it.SeekGE(col); valid && bytes.HasPrefix(s.it.Key(), col); valid = s.it.Next() {
		k := s.it.Key()
		if err := s.step(); err != nil {
			return dst, err
		}
		ts := storage.DecodeSuffix(k[len(k)-storage.SuffixLen:])
		v, err := s.it.ValueAndErr()
		if err != nil {
			return dst, err
		}
		data, exp, err := storage.DecodeValue(v)
		if err != nil {
			return dst, err
		}
		if exp == 0 || exp > s.now {
			if fam.GC.Check(pos, ts, s.now) == gcrule.ReasonNone {
				if err := s.keepBytes(len(data) + len(q)); err != nil {
					return dst, err
				}
				dst = append(dst, cell.Cell{Family: fam.Name, Qualifier: q, Timestamp: ts, Value: s.copyValue(data), ExpireAt: exp})
			}
			pos++
		}
		if ts >= 0 && fam.GC.Check(pos, ts, s.now) != gcrule.ReasonNone {
			break // see scanForward
		}
	}
	if err := s.it.Error(); err != nil {
		return dst, err
	}
	slices.Reverse(dst[first:])
	return dst, nil
}

// scanForward walks the iterator's bounds in key order, emitting each row
// (in Bigtable order) with the cells a reader may see, judged one by one.
func (s *scanner) scanForward(emit func(cell.Row) error) error {
	var (
		row       cell.Row
		prefix    []byte // the row's key prefix
		col       []byte // the column's key (a cell key without its suffix)
		fam       *Family
		rule      gcrule.Rule // the family rule readers obey; None in UntilCollected mode
		pos       int         // the column's unexpired versions met so far
		colBuf    [64]byte    // most column keys fit, and then col stays on the stack
		prefixBuf [48]byte    // and most row prefixes
	)
	col, prefix = colBuf[:0], prefixBuf[:0]
	valid := s.it.First()
	for valid {
		k := s.it.Key()
		if err := s.step(); err != nil {
			return err
		}
		n := storage.RowKeyLen(k)
		if len(prefix) == 0 || !bytes.Equal(prefix, k[:n]) {
			if len(prefix) != 0 {
				s.hint(row)
				if err := emit(row); err != nil {
					return err
				}
			}
			prefix = append(prefix[:0], k[:n]...)
			var err error
			if row, err = s.newRow(prefix); err != nil {
				return err
			}
			col = col[:0]
			if s.head != nil {
				s.head.StartRow(row.Key)
			}
		}
		ck := k[:len(k)-storage.SuffixLen]
		if len(col) == 0 || !bytes.Equal(col, ck) {
			if len(ck) < n+4 {
				return fmt.Errorf("%w: %x", storage.ErrCorruptKey, k)
			}
			col = append(col[:0], ck...)
			pos = 0
			var ok bool
			if fam, ok = s.m.FamilyByID(binary.BigEndian.Uint32(ck[n:])); !ok {
				valid = s.skipColumn(col) // a dropped family's cells
				continue
			}
			rule = gcrule.Rule{}
			if s.e.vis == HideEligible {
				rule = fam.GC
			}
			if s.head != nil {
				s.head.StartColumn()
				q, err := s.qualifier(ck[n+4:])
				if err != nil {
					return err
				}
				if s.head.SkipColumn(fam.Name, q) {
					valid = s.skipColumn(col)
					continue
				}
			}
		}
		ts := storage.DecodeSuffix(k[len(k)-storage.SuffixLen:])
		v, err := s.it.ValueAndErr()
		if err != nil {
			return err
		}
		data, exp, err := storage.DecodeValue(v)
		if err != nil {
			return err
		}
		// ColumnEligibility's verdict, one cell at a time: an expired cell
		// is hidden and takes no position; the rule judges the rest.
		show := true
		if exp != 0 && exp <= s.now {
			show = false
		} else {
			if !rule.IsNone() && rule.Check(pos, ts, s.now) != gcrule.ReasonNone {
				show = false
			}
			pos++
		}
		skipCol, skipRow := false, false
		var q []byte
		if show {
			if q, err = s.qualifier(ck[n+4:]); err != nil {
				return err
			}
		}
		if show && s.head != nil {
			// The filter's head judges the cell, and says when the rest
			// of the column or row cannot pass it.
			var skip filter.Skip
			show, skip = s.head.Cell(fam.Name, q, ts, data)
			skipCol, skipRow = skip == filter.SkipColumn, skip == filter.SkipRow
		}
		if show {
			if err := s.keepBytes(len(data) + len(q)); err != nil {
				return err
			}
			row.Cells = append(row.Cells, cell.Cell{
				Family:    fam.Name,
				Qualifier: q,
				Timestamp: ts,
				Value:     s.copyValue(data),
				ExpireAt:  exp,
			})
		}
		// Every rule term is a threshold that only more position or more
		// age crosses, and the column's later versions are older (keys
		// sort newest first for timestamps >= 0, the only ones writes
		// accept) and take later positions: if the rule makes the next
		// position eligible at this cell's timestamp, it makes every
		// later version eligible.
		hiddenTail := false
		if !skipCol && !skipRow && !rule.IsNone() && ts >= 0 && rule.Check(pos, ts, s.now) != gcrule.ReasonNone {
			skipCol, hiddenTail = true, true
		}
		switch {
		case skipRow:
			valid = s.seekPast(prefix)
		case skipCol:
			s.sought = false
			valid = s.skipColumn(col)
			if hiddenTail && s.sought {
				// more hidden versions than skipColumn steps over (a copy:
				// prefix stays on the stack)
				s.e.reportPile(s.m.ID, bytes.Clone(prefix))
			}
		default:
			valid = s.it.Next()
		}
	}
	if err := s.it.Error(); err != nil {
		return err
	}
	if len(prefix) != 0 {
		s.hint(row)
		return emit(row)
	}
	return nil
}

// readRowLocked reads one row's visible cells (no filter) from the latest
// state. Callers hold the row lock. What it returns may include a write still
// waiting for its sync: a caller that answers from it must call the returned
// gate's row before it answers. One that writes is synced after that write,
// and so after it, but a point read skips a cell-only write until its ticket
// is given back (durability), so a later read could otherwise miss a write
// the answer rested on.
func (e *Engine) readRowLocked(m *Meta, row []byte) (cell.Row, readGate, error) {
	prefix := storage.RowPrefix(m.ID, row)
	it, err := e.store.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: storage.PrefixEnd(prefix)})
	if err != nil {
		return cell.Row{}, readGate{}, err
	}
	defer it.Close()
	g := e.gate(nil)
	s := scanner{e: e, m: m, it: it, now: e.nowMicros()}
	out := cell.Row{Key: bytes.Clone(row)}
	err = s.scanForward(func(r cell.Row) error {
		out.Cells = r.Cells
		return nil
	})
	return out, g, readError(err)
}
