package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/ebbtable/ebbtable/changestream"
	tablets "github.com/ebbtable/ebbtable/cluster"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
	"github.com/prometheus/client_golang/prometheus"
)

// Change-stream history across a failover take-over (docs/scale-out.md
// "Automatic failover", docs/change-streams.md "In a cluster"). Each
// checkpoint of a span carries the span's records beside it (an object
// named after the checkpoint, ".changes"), read after the checkpoint's log
// position; the log's batches after that position carry the records of
// their writes. A take-over gathers both for the tablets it takes and
// imports them here under their original positions (the dead node's
// commit timestamps and tiebreaker) before it flips the owner, and this
// node's commit sequence is raised past them: a reader of the dead node's
// partition resumes here from its token with nothing the log or the
// checkpoints hold lost or repeated, and the rows' later records follow.

// changesObjects bounds the objects of records a span's checkpoint keeps:
// past it, a round writes the span's whole history again in one (which
// also leaves out the records the stream's retention dropped since).
const changesObjects = 16

// checkpointChanges stores the records of span s beside checkpoint name
// and sets entry's Changes, ChangesPrev and ChangesClosed. With the span's
// previous checkpoint prev (held since no change records were imported
// here: a move or take-over may import records under positions below the
// last closed timestamp), only the records committed after its closed
// timestamp are read and written (none: its objects stand); the earlier
// objects stay named in the entry. Else (or past changesObjects objects)
// the span's whole history is written, in one object.
//
// Nothing is missed between rounds: every record committed at or before
// a closed timestamp was visible when it was taken, so the objects up to
// a round hold every record at or before its closed timestamp, and the
// next round reads on from there (the few records past it that the
// previous read saw are written again: a take-over imports them twice,
// harmlessly).
func (f *failover) checkpointChanges(ref tableRef, s ownedSpan, name string, prev *heldCheckpoint, imports uint64, entry *storage.CatalogEntry) error {
	eng := f.c.s.engine
	m, err := eng.Table(ref.instance, ref.table)
	if err != nil || !eng.Streaming(m.ID) {
		return err // no stream (and no replication): no records
	}
	closed := eng.ClosedTimestamp() // before the read
	lower := changestream.TableStart(m.ID)
	var base []string
	if p := prev; p != nil && p.imports == imports && p.entry.TableID == m.ID && p.entry.ChangesClosed > 0 &&
		(p.entry.Changes != "" || len(p.entry.ChangesPrev) == 0) && len(p.entry.ChangesPrev)+1 < changesObjects {
		if p.entry.Changes != "" {
			base = append(append(base, p.entry.ChangesPrev...), p.entry.Changes)
		}
		lower = changestream.TimeKey(m.ID, p.entry.ChangesClosed+1)
	}
	recs, err := eng.SpanHistoryFrom(m, lower, s.start, s.end)
	if err != nil {
		return err
	}
	entry.ChangesClosed = closed
	if len(recs) == 0 {
		if len(base) > 0 {
			entry.Changes, entry.ChangesPrev = base[len(base)-1], base[:len(base)-1]
		}
		return nil
	}
	obj := name + ".changes"
	b := table.MarshalChanges(recs)
	if err := storage.PutObject(f.c.store, obj, b); err != nil {
		return fmt.Errorf("ebbtable: checkpoint %s: %w", obj, err)
	}
	f.changesBytes.Add(uint64(len(b)))
	f.c.changes.carried.WithLabelValues("checkpoint").Add(float64(len(recs)))
	entry.Changes, entry.ChangesPrev = obj, base
	return nil
}

// changesImported notes that change records were imported here (a move,
// a take-over), once they are: the next round writes every span's history
// whole.
func (c *clusterMember) changesImported() {
	if c.fail != nil {
		c.fail.imports.Add(1)
	}
}

// recoveredChanges gathers a take-over's records of the taken tablets.
type recoveredChanges struct {
	spans []table.RowSpan
	recs  []changestream.Record
}

// fromCheckpoint adds the records stored beside a checkpoint (in its
// objects, oldest first).
func (rc *recoveredChanges) fromCheckpoint(ctx context.Context, st storage.ObjectStore, e storage.CatalogEntry) error {
	if e.Changes == "" {
		return nil
	}
	for _, obj := range append(append([]string(nil), e.ChangesPrev...), e.Changes) {
		b, err := storage.GetObject(ctx, st, obj)
		if err != nil {
			return fmt.Errorf("ebbtable: checkpoint %s: %w", obj, err)
		}
		recs, err := table.UnmarshalChanges(b)
		if err != nil {
			return fmt.Errorf("ebbtable: checkpoint %s: %w", obj, err)
		}
		rc.recs = append(rc.recs, table.FilterChanges(recs, rc.spans)...)
	}
	return nil
}

// fromLog adds the records a log batch carries of rows in spans.
func (rc *recoveredChanges) fromLog(m *table.Meta, spans []table.RowSpan, repr []byte) error {
	recs, err := table.LoggedChanges(m, spans, repr)
	rc.recs = append(rc.recs, recs...)
	return err
}

// importTo writes the records into eng, a few thousand a batch (each
// raises the commit sequence past its last), and forgets this node's old
// marks of the tablets (a tablet coming back here). It returns how many
// records it imported.
func (rc *recoveredChanges) importTo(c *clusterMember, m *table.Meta, tableName string, ts []tablets.Tablet) (int, error) {
	for _, t := range ts {
		c.dropMarks(tableName, t.Start, t.End)
	}
	defer c.changesImported() // once the records are in
	for i := 0; i < len(rc.recs); i += 4096 {
		if err := c.s.engine.ImportChanges(m, rc.recs[i:min(i+4096, len(rc.recs))]); err != nil {
			return 0, err
		}
	}
	c.changes.carried.WithLabelValues("takeover").Add(float64(len(rc.recs)))
	return len(rc.recs), nil
}

// newCarriedMetric is ebbtable_change_records_carried_total.
func newCarriedMetric() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ebbtable_change_records_carried_total",
		Help: "Change-stream records carried between nodes, by path: move (shipped to a planned move's target), checkpoint (stored beside a failover checkpoint), takeover (imported by a failover take-over), drain (imported for node drain --force)."}, []string{"path"})
}

// forcedChanges is node drain --force's part (forceReassign): before the
// dead node's tablets of d are given to the nodes plan names, each new
// owner gets the dead node's records of its tablets that its checkpoints
// and commit log hold (a node that ran with failover left them in the
// shared store), as a take-over would import them, and raises its commit
// sequence past them. The tablets' cells are not rebuilt (--force gives
// them up). Without a catalog there is nothing to carry.
func (c *clusterMember) forcedChanges(ctx context.Context, node string, d tablets.Directory, plan []tablets.Move) error {
	if c.store == nil || len(plan) == 0 {
		return nil
	}
	ref, err := parseTable(d.Table)
	if err != nil {
		return err
	}
	m, err := c.s.engine.Table(ref.instance, ref.table)
	if errors.Is(err, table.ErrTableNotFound) || (err == nil && (m.ID != d.TableID || !c.s.engine.Streaming(m.ID))) {
		return nil // no records: no stream (and no replication), or not this table
	}
	if err != nil {
		return err
	}
	cat, ok, err := storage.ReadCatalog(c.store, node)
	if err != nil || !ok {
		return err
	}
	// The planned tablets' records, from the checkpoints that reach them
	// and the log after the oldest of those (one pass).
	var ts []tablets.Tablet
	rc := &recoveredChanges{}
	for _, mv := range plan {
		if t, _, found := d.Find(mv.Tablet); found {
			ts = append(ts, t)
			rc.spans = append(rc.spans, table.RowSpan{Start: t.Start, End: t.End})
		}
	}
	from := cat.Truncated
	for _, e := range cat.Entries {
		reaches := false
		for _, t := range ts {
			reaches = reaches || tablets.Overlaps(e.StartRow, e.EndRow, t.Start, t.End)
		}
		if e.Table != d.Table || e.TableID != d.TableID || !reaches {
			continue
		}
		from = min(from, e.After)
		if err := rc.fromCheckpoint(ctx, c.store, e); err != nil {
			return err
		}
	}
	err = storage.ReadCommitLog(ctx, c.store, node, from, func(_, _ uint64, repr []byte) error {
		return rc.fromLog(m, rc.spans, repr)
	})
	if err != nil {
		return err
	}
	for _, mv := range plan {
		t, _, found := d.Find(mv.Tablet)
		if !found {
			continue
		}
		recs := table.FilterChanges(rc.recs, []table.RowSpan{{Start: t.Start, End: t.End}})
		if len(recs) == 0 {
			continue
		}
		n, live := c.m.Node(mv.To)
		if !live {
			return fmt.Errorf("ebbtable: node %s is not live", mv.To)
		}
		cc, err := c.conn(n.Addr)
		if err != nil {
			return err
		}
		if err := shipRecords(ctx, clusterpb.NewClusterClient(cc), d.Table, t, recs); err != nil {
			return fmt.Errorf("ebbtable: node %s could not take %s's change-stream records of %s: %w", mv.To, node, t, err)
		}
		c.changes.carried.WithLabelValues("drain").Add(float64(len(recs)))
		c.s.log.Info("carried a dead node's change-stream records to its tablet's new owner", "dead", node, "tablet", t.String(), "to", mv.To, "change_records", len(recs))
	}
	return nil
}

// shipRecords sends records to a node's IngestChanges, about 1 MiB a
// call; the last call raises its commit sequence past them.
func shipRecords(ctx context.Context, cl clusterpb.ClusterClient, tableName string, t tablets.Tablet, recs []changestream.Record) error {
	var high int64
	req := &clusterpb.IngestChangesRequest{Table: tableName, Start: t.Start, End: t.End}
	size := 0
	for _, r := range recs {
		enc := r.Encode()
		req.Records = append(req.Records, &clusterpb.ChangeRecord{Commit: r.Commit, Tiebreaker: r.Tiebreaker, Index: r.Index, Record: enc})
		high = max(high, r.Commit)
		size += len(enc) + 32
		if size >= 1<<20 {
			if _, err := cl.IngestChanges(ctx, req); err != nil {
				return err
			}
			req.Records, size = nil, 0
		}
	}
	req.Observe = high
	_, err := cl.IngestChanges(ctx, req)
	return err
}
