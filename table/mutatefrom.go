package table

import (
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
)

// MutationSource is the entries of a MutateRows read where they lie: the
// server reads them from the request's wire bytes, so no message, Mutation
// or prepared array is built per request (MutateRowsFrom).
type MutationSource interface {
	// Len is the number of entries.
	Len() int
	// Rewind goes back to before the first entry.
	Rewind()
	// NextEntry moves to the next entry and returns its row key and its
	// number of mutations; ok is false after the last entry.
	NextEntry() (row []byte, muts int, ok bool)
	// NextMutation fills mu with the current entry's next mutation; false
	// after its last.
	NextMutation(mu *Mutation) bool
}

// MutateRowsFrom is MutateRows reading its entries from src once: every
// entry is validated (one whose check fails gets its error and is not
// written) and each valid entry's mutations are kept checked (prepared,
// family id included) with its row and row-lock stripe; then, under the
// rows' locks, the kept mutations go straight into the batch. The row
// keys, qualifiers and values src returns must stay unchanged until the
// call returns (change-stream records keep them). The errors returned,
// one per entry, must not be written: when none failed, they are a slice
// of nils shared with other calls.
func (e *Engine) MutateRowsFrom(instance, table string, src MutationSource) ([]error, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	m, err := e.Table(instance, table)
	if err != nil {
		return nil, err
	}
	n := src.Len()
	var errs []error // made at the first refused entry
	refuse := func(i int, err error) {
		if errs == nil {
			errs = make([]error, n)
		}
		errs[i] = err
	}
	sc := getMutateScratch()
	defer putMutateScratch(sc)
	needsRead := false
	prepNow := clock.MillisTruncated(e.clock.Now())
	mu := &sc.mu // src's method would move a local one to the heap
	src.Rewind()
	for i := 0; i < n; i++ {
		row, k, ok := src.NextEntry()
		if !ok {
			return nil, fmt.Errorf("table: a mutation source of %d entries ended after %d", n, i)
		}
		if err := prepareEntry(row, k); err != nil {
			refuse(i, err)
			continue
		}
		start := len(sc.preps)
		reads, refused := false, false
		for j := 0; src.NextMutation(mu); j++ {
			sc.preps = append(sc.preps, prepared{})
			p := &sc.preps[len(sc.preps)-1]
			if err := e.prepareOne(p, m, j, mu, prepNow); err != nil {
				refuse(i, err)
				refused = true
				break
			}
			reads = reads || p.Kind != SetCell
		}
		if refused {
			clear(sc.preps[start:])
			sc.preps = sc.preps[:start]
			continue
		}
		sc.rows = append(sc.rows, row)
		sc.ends = append(sc.ends, len(sc.preps))
		sc.stripes = append(sc.stripes, e.stripe(m.ID, row))
		needsRead = needsRead || reads
	}
	if errs == nil {
		errs = noErrors(n)
	}
	rows := sc.rows
	if len(rows) == 0 {
		return errs, nil
	}
	unlock := e.lockStripes(sc.stripes, &sc.locked)
	var b *pebble.Batch
	if needsRead {
		b = e.store.NewIndexedBatch()
	} else {
		b = e.store.NewBatch()
	}
	var recs []changestream.Record
	stamp := e.writeStamp()
	now := clock.MillisTruncated(e.clock.Now())
	var cells cellsOnly
	cells.only = !needsRead && len(sc.preps) <= cellsOnlyMax
	cells.look = e.lookups.look(now) && cells.only
	defer cells.close()
	fail := func(err error) ([]error, error) {
		e.endStamp(stamp)
		e.forgetAgendaMarks(m.ID, rows)
		unlock()
		b.Close()
		return nil, err
	}
	start := 0
	for r, row := range rows {
		rec := e.userRecord(m, row)
		for _, p := range sc.preps[start:sc.ends[r]] {
			q := p.at(now)
			written, err := e.applyOne(b, m, row, q, stamp)
			if err == nil {
				err = cells.addAt(e, m, row, q, sc.stripes[r])
			}
			if err != nil {
				return fail(err)
			}
			if rec != nil {
				rec.Mods = append(rec.Mods, modWritten(q, written))
			}
		}
		start = sc.ends[r]
		if rec != nil {
			recs = append(recs, *rec)
		}
	}
	wait, err := e.commitVisibleAt(b, m, rows, sc.locked, recs, stamp.Commit, cells.get())
	if err != nil {
		e.forgetAgendaMarks(m.ID, rows)
	}
	unlock()
	if err != nil {
		sc.lost = true // its commit ticket may still name sc.locked
		return nil, err
	}
	if err := wait(); err != nil {
		sc.lost = true
		return nil, err
	}
	return errs, nil
}

// noErrors returns n nil errors: MutateRowsFrom's answer when no entry was
// refused, shared between calls up to len(allNil) entries (a make of a
// bulk write's 100 was 1.4% of the server's CPU under bulk writes, most of
// it setting up and clearing a fresh pointer array). Callers only read it.
func noErrors(n int) []error {
	if n <= len(allNil) {
		return allNil[:n:n]
	}
	return make([]error, n)
}

// allNil backs noErrors; it is never written.
var allNil [1024]error

// mutateScratch is MutateRowsFrom's per-call working memory, pooled: the
// valid entries' rows, their row-lock stripes, their checked mutations
// (preps; entry r's are preps[ends[r-1]:ends[r]]) and the stripes locked
// (sorted, each once; the commit's durability ticket names them too).
type mutateScratch struct {
	rows    [][]byte
	stripes []int
	ends    []int
	preps   []prepared
	locked  []int
	mu      Mutation // the mutation src fills
	// lost: a commit that failed may still hold locked; sc is not pooled.
	lost bool
}

var mutateScratchPool = sync.Pool{New: func() any { return new(mutateScratch) }}

func getMutateScratch() *mutateScratch { return mutateScratchPool.Get().(*mutateScratch) }

// putMutateScratch empties sc (dropping its references to the request's
// bytes) and pools it, unless it grew past a large request's size.
func putMutateScratch(sc *mutateScratch) {
	if sc.lost || cap(sc.preps) > 1<<14 || cap(sc.rows) > 1<<14 {
		return
	}
	clear(sc.rows)
	clear(sc.preps)
	sc.mu = Mutation{}
	sc.rows, sc.stripes, sc.ends, sc.preps, sc.locked = sc.rows[:0], sc.stripes[:0], sc.ends[:0], sc.preps[:0], sc.locked[:0]
	mutateScratchPool.Put(sc)
}
