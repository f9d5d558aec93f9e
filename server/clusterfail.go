package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/clock"
	tablets "github.com/ebbtable/ebbtable/cluster"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Automatic failover (docs/scale-out.md, "Automatic failover"), on with
// ClusterOptions.Failover and shared storage:
//
//   - Every batch of user writes is first written to this node's commit log
//     in the shared store (storage/commitlog.go); a write is acknowledged
//     only once its log object exists and the node's lease fence still
//     holds, so nothing acknowledged is missing from the log when etcd
//     expires the lease.
//   - Checkpoint rounds (every CheckpointInterval while the log grows, and
//     at once when the tablets this node owns change) export each owned
//     tablet's span (shared SSTables by reference, held until the next
//     round; the local levels' keys copied) into the store, write a catalog
//     naming them with the log position each holds, and truncate the log
//     below the oldest.
//   - A node taking a tablet (the target of a move, before the source
//     flips; a node recovering one, before its own flip) checkpoints it
//     first, so its catalog covers every tablet it may be named owner of.
//   - When a node's key leaves etcd (its lease expired, or it left), every
//     survivor computes the same plan (cluster.PlanTakeOvers: each table's
//     tablets of the dead node to the least loaded node); the node chosen
//     ingests the dead node's checkpoints, replays its log after them,
//     checkpoints the result, and becomes the owner in one etcd transaction
//     that holds only while the dead node's key is absent.

// failover is a node's part in automatic failover.
type failover struct {
	c      *clusterMember
	member atomic.Pointer[clusteretcd.Member] // set once joined; the fence asks it
	// imports counts the imports of change records (moves, take-overs)
	// and changesBytes the bytes of change records checkpoints wrote
	// (clusterfailchanges.go).
	imports, changesBytes atomic.Uint64
	log                   *storage.CommitLog
	interval              time.Duration
	grace                 time.Time // no take-overs before (peers restarting with us register)

	roundMu sync.Mutex
	round   uint64
	cur     []heldCheckpoint
	rounds  atomic.Int64
	// loopPaused stops checkpointLoop's rounds (tests: a node that dies
	// before its loop catches up with a change).
	loopPaused atomic.Bool
	lastFP     string
	lastNext   uint64
	lastAt     time.Time
	// pending are spans this node took (a move's target before the flip,
	// a take-over before its flip): checkpointed in every round until the
	// directory names this node their owner or a minute passes.
	pending map[string]pendingSpan

	// takeMu keeps ingests of moved tablets out while a take-over runs:
	// its checkpoints must not reach a span arriving here meanwhile.
	takeMu sync.Mutex

	kick chan struct{}
	// failures counts failed take-overs by group, to retry with a pause.
	failMu   sync.Mutex
	failures map[string]time.Time

	// seed are the spans of this node's catalog when it started (under
	// roundMu): those of tables deleted since keep their checkpoints.
	seed []ownedSpan
	// victims are dead nodes whose tablets were planned for take-over
	// (takeOverLoop's own): once they own none, their schema-log progress
	// is forgotten and their shared objects released.
	victims map[string]*victim

	// stageHook, when set (tests), runs at steps of a take-over.
	stageHook atomic.Pointer[func(stage string)]
	// takeOversPaused (tests) holds this node's take-overs back.
	takeOversPaused atomic.Bool
	// step is what takeOverLoop is doing now (nil: waiting), for a test
	// that waits on a take-over to say where it is stuck.
	step atomic.Pointer[loopStep]
}

// loopStep is one step of takeOverLoop under way, and since when.
type loopStep struct {
	what  string
	since time.Time
}

// unpend forgets spans a take-over added to pending whose flip failed.
func (f *failover) unpend(spans []ownedSpan) {
	f.roundMu.Lock()
	defer f.roundMu.Unlock()
	for _, s := range spans {
		delete(f.pending, s.key())
	}
}

// atStage records the stage a take-over of g reached (see step).
func (f *failover) atStage(g tablets.TakeOver, stage string) {
	f.setStep("take over " + g.Dead + "'s tablets of " + g.Table + ": " + stage)
}

// setStep records takeOverLoop's current step (what "": none).
func (f *failover) setStep(what string) {
	if what == "" {
		f.step.Store(nil)
		return
	}
	f.step.Store(&loopStep{what: what, since: time.Now()})
}

// victim is a dead node whose tablets were planned for take-over.
type victim struct {
	forgot bool      // its schema-log progress mark was removed
	empty  time.Time // when it was first seen owning nothing (zero: not yet)
}

type pendingSpan struct {
	span  ownedSpan
	since time.Time
}

// ownedSpan is one tablet's rows in a table ("projects/P/instances/I/tables/T").
type ownedSpan struct {
	table      string
	start, end []byte
	// deleted is the id of a table deleted within its undelete retention
	// whose span this node owned: its checkpoint stays for an undelete.
	deleted uint64
}

func (s ownedSpan) key() string {
	k := fmt.Sprintf("%s\x00%x\x00%x", s.table, s.start, s.end)
	if s.deleted != 0 {
		k += fmt.Sprintf("\x00deleted %d", s.deleted)
	}
	return k
}

// openFailover opens this node's commit log and sends the engine's writes
// to it, before the node joins the cluster (so before it serves a write:
// none is acknowledged without the log). Until the node has joined, the
// log's fence refuses every write.
func (c *clusterMember) openFailover() error {
	if !c.opts.Failover {
		return nil
	}
	if c.store == nil {
		return fmt.Errorf("%w: automatic failover needs shared storage (--shared-storage)", errInvalid)
	}
	interval := c.opts.CheckpointInterval
	if interval <= 0 {
		interval = 30 * time.Second
	}
	f := &failover{c: c, interval: interval,
		pending: map[string]pendingSpan{}, kick: make(chan struct{}, 1), failures: map[string]time.Time{}, victims: map[string]*victim{}}
	l, err := storage.OpenCommitLog(storage.CommitLogOptions{Store: c.store, Node: c.opts.NodeID, Fence: func() error {
		if m := f.member.Load(); m == nil || !m.Live() {
			return status.Errorf(codes.Unavailable, "ebbtable: node %s does not hold its lease now; retry", c.opts.NodeID)
		}
		return nil
	}, Tag: c.appliedSeq})
	if err != nil {
		return err
	}
	f.log = l
	if cat, ok, err := storage.ReadCatalog(c.store, c.opts.NodeID); err == nil && ok {
		f.round = cat.Round
		// Checkpoints of tables deleted since stay in the catalog while
		// the tables may be undeleted (deletedSpans); not a previous
		// engine's (an empty data directory: clusterfresh.go).
		for _, e := range cat.Entries {
			if c.fresh {
				break
			}
			f.seed = append(f.seed, ownedSpan{table: e.Table, start: e.StartRow, end: e.EndRow, deleted: e.TableID})
		}
	}
	c.fail = f
	c.s.engine.SetCommitLog(l)
	return nil
}

// clusterSettings are the settings every node of the cluster must share
// (clusteretcd.Options.Settings): automatic failover is all or nothing,
// since a node without it leaves nothing to take over from.
func (c *clusterMember) clusterSettings() map[string]string {
	return map[string]string{"failover": strconv.FormatBool(c.opts.Failover)}
}

// joinedFailover gives the log's fence the node's membership: from now on
// it follows the lease (the schema log's catch-up logs its row-range
// drops). Without failover it deletes the node's catalog, once the
// cluster has accepted the setting: nobody takes this node's tablets over
// from checkpoints it no longer keeps current.
func (c *clusterMember) joinedFailover(m *clusteretcd.Member) error {
	if c.fail == nil {
		if c.store != nil {
			return storage.DeleteCatalogs(c.store, c.opts.NodeID)
		}
		return nil
	}
	c.fail.member.Store(m)
	return nil
}

// startFailover, once the node has joined and caught up with the schema
// log, writes a first checkpoint round and starts the loops.
func (c *clusterMember) startFailover() error {
	f := c.fail
	if f == nil {
		return nil
	}
	f.grace = c.s.opts.Clock.Now().Add(c.leaseTTL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.checkpoint(ctx, nil, true); err != nil {
		return fmt.Errorf("ebbtable: first checkpoint round: %w", err)
	}
	c.wg.Add(2)
	go f.checkpointLoop()
	go f.takeOverLoop()
	return nil
}

// ownedSpans lists the tablets the directory gives this node.
func (f *failover) ownedSpans() []ownedSpan {
	var out []ownedSpan
	for _, d := range f.c.m.Directories() {
		for _, t := range d.Tablets {
			if t.Owner == f.c.opts.NodeID {
				out = append(out, ownedSpan{table: d.Table, start: t.Start, end: t.End})
			}
		}
	}
	return out
}

// heldCheckpoint is one entry of this node's current catalog, with the
// export whose hold keeps its shared SSTables in the store.
type heldCheckpoint struct {
	span  ownedSpan
	entry storage.CatalogEntry
	x     *table.SpanExport
	// imports is f.imports when entry's change records were read
	// (clusterfailchanges.go).
	imports uint64
}

// checkpoint runs one round: the catalog is replaced by one covering every
// owned tablet, every pending span and extra, and the log is truncated
// below the oldest checkpoint. A full round (asked for, and due: the last
// was an interval ago) exports every span again, so the log shrinks;
// otherwise only spans without a checkpoint are exported (a tablet taken,
// split or merged) and the others are kept. A round that would change
// nothing (the same spans, and not full or no log record since the last
// full one) is skipped.
func (f *failover) checkpoint(ctx context.Context, extra []ownedSpan, full bool) error {
	f.roundMu.Lock()
	defer f.roundMu.Unlock()
	now := f.c.s.opts.Clock.Now()
	owned := f.ownedSpans()
	ownedKeys := map[string]bool{}
	for _, s := range owned {
		ownedKeys[s.key()] = true
	}
	for _, s := range extra {
		f.pending[s.key()] = pendingSpan{span: s, since: now}
	}
	all := append([]ownedSpan(nil), owned...)
	for k, p := range f.pending {
		if ownedKeys[k] || now.Sub(p.since) > time.Minute {
			delete(f.pending, k)
			continue
		}
		all = append(all, p.span)
	}
	all = append(all, f.deletedSpans(all)...)
	sort.Slice(all, func(i, j int) bool { return all[i].key() < all[j].key() })
	var fp strings.Builder
	for _, s := range all {
		fp.WriteString(s.key())
		fp.WriteByte('\n')
	}
	next := f.log.Next()
	if full && now.Sub(f.lastAt) < f.interval {
		full = false // not due yet
	}
	if fp.String() == f.lastFP && (!full || next == f.lastNext) {
		return nil
	}
	cur := map[string]heldCheckpoint{}
	for _, h := range f.cur {
		cur[h.span.key()] = h
	}
	trunc := f.log.CommittedThrough()
	tag := f.c.appliedSeq()
	imports := f.imports.Load() // before any record is read
	round := f.round + 1
	var kept []heldCheckpoint
	var fresh []*table.SpanExport
	ok := false
	defer func() {
		if !ok {
			for _, x := range fresh {
				x.Release()
			}
		}
	}()
	for i, s := range all {
		// A deleted table's checkpoint is taken once (its data changes no
		// more), then kept.
		if h, found := cur[s.key()]; found && (!full || s.deleted != 0) {
			kept = append(kept, h)
			trunc = min(trunc, h.entry.After)
			continue
		}
		ref, err := parseTable(s.table)
		if err != nil {
			continue
		}
		after := f.log.CommittedThrough()
		var x *table.SpanExport
		if s.deleted != 0 {
			x, err = f.c.s.engine.ExportDeletedSpan(ctx, ref.instance, ref.table, s.deleted, s.start, s.end)
		} else {
			x, err = f.c.s.engine.ExportSpan(ctx, ref.instance, ref.table, s.start, s.end)
		}
		if errors.Is(err, table.ErrTableNotFound) {
			continue // not created here yet: it holds nothing here (or purged)
		}
		if err != nil {
			return err
		}
		fresh = append(fresh, x)
		b, err := x.Marshal()
		if err != nil {
			return err
		}
		name := storage.CheckpointName(f.c.opts.NodeID, round, i)
		if err := storage.PutObject(f.c.store, name, b); err != nil {
			return fmt.Errorf("ebbtable: checkpoint %s: %w", name, err)
		}
		x.TrimLocal()
		entry := storage.CatalogEntry{Table: s.table, TableID: x.TableID, StartRow: s.start, EndRow: s.end, After: after, Object: name, Deleted: s.deleted != 0}
		if s.deleted == 0 {
			// Replication tombstones live outside the cell space: beside
			// the export (takeOver puts them back).
			tombs, err := f.c.s.engine.SpanTombstones(ref.instance, ref.table, s.start, s.end)
			if err != nil {
				return err
			}
			if len(tombs) > 0 {
				entry.Tombstones = name + ".tombs"
				if err := storage.PutObject(f.c.store, entry.Tombstones, tombs); err != nil {
					return fmt.Errorf("ebbtable: checkpoint %s: %w", entry.Tombstones, err)
				}
			}
			// So are the span's change-stream records (clusterfailchanges.go).
			var prev *heldCheckpoint
			if h, found := cur[s.key()]; found {
				prev = &h
			}
			if err = f.checkpointChanges(ref, s, name, prev, imports, &entry); err != nil {
				return err
			}
		}
		kept = append(kept, heldCheckpoint{span: s, x: x, entry: entry, imports: imports})
		trunc = min(trunc, after)
	}
	entries := make([]storage.CatalogEntry, len(kept))
	for i, h := range kept {
		entries[i] = h.entry
	}
	cat := storage.CommitCatalog{Node: f.c.opts.NodeID, Round: round, Truncated: trunc, Next: next, Tag: tag, Entries: entries}
	if err := storage.WriteCatalog(f.c.store, cat); err != nil {
		return err
	}
	ok = true
	keep := map[string]bool{}
	for _, e := range entries {
		keep[e.Object] = true
		if e.Tombstones != "" {
			keep[e.Tombstones] = true
		}
		if e.Changes != "" {
			keep[e.Changes] = true
		}
		for _, o := range e.ChangesPrev {
			keep[o] = true
		}
	}
	for _, h := range f.cur {
		if !keep[h.entry.Object] {
			h.x.Release()
		}
	}
	f.round, f.cur, f.lastFP, f.seed = round, kept, fp.String(), nil
	if full {
		f.lastNext, f.lastAt = next, now
	}
	f.rounds.Add(1)
	kind := "incremental"
	if full {
		kind = "full"
	}
	f.c.failMetrics.rounds.WithLabelValues(kind).Inc()
	if err := storage.DeleteCheckpoints(f.c.store, f.c.opts.NodeID, keep); err != nil {
		f.c.s.log.Warn("delete old checkpoints", "err", err)
	}
	if err := f.log.Truncate(trunc); err != nil {
		f.c.s.log.Warn("truncate the commit log", "err", err)
	}
	return nil
}

// deletedSpans are the spans of this node's last catalog (or, before its
// first round, of its previous process's) whose tables are deleted now and
// may still be undeleted (the engine keeps a deleted record under the
// same id), and that are not among live: their checkpoints stay, so a
// node that takes them over after an undelete finds them. (Roundmu held.)
func (f *failover) deletedSpans(live []ownedSpan) []ownedSpan {
	seen := map[string]bool{}
	for _, s := range live {
		seen[s.key()] = true
	}
	cands := append([]ownedSpan(nil), f.seed...)
	for _, h := range f.cur {
		s := h.span
		s.deleted = h.entry.TableID
		cands = append(cands, s)
	}
	var out []ownedSpan
	for _, s := range cands {
		plain := s
		plain.deleted = 0
		if seen[s.key()] || seen[plain.key()] {
			continue
		}
		ref, err := parseTable(s.table)
		if err != nil {
			continue
		}
		if m, err := f.c.s.engine.Table(ref.instance, ref.table); !errors.Is(err, table.ErrTableNotFound) {
			if _, dir := f.c.m.Directory(s.table); err == nil && !dir && s.deleted != 0 && m.ID == s.deleted {
				// Its directory is gone but this node has not applied
				// the delete yet: its checkpoint stays, as the live
				// table's (TestFailoverFreshDirKeptTable).
				if !seen[plain.key()] {
					seen[plain.key()] = true
					out = append(out, plain)
				}
			}
			continue // live (moved away, or a new table of the name)
		}
		if id, ok := f.c.s.engine.DeletedTableID(ref.instance, ref.table); !ok || id != s.deleted {
			continue // purged, or never here
		}
		seen[s.key()] = true
		out = append(out, s)
	}
	return out
}

// checkpointLoop runs rounds on the interval, and at once when the
// directory changes (a tablet split, merged, arrived or left).
func (f *failover) checkpointLoop() {
	c := f.c
	defer c.wg.Done()
	for {
		// A directory change usually comes first: the timer is stopped then.
		timer, stop := clock.Timer(c.s.opts.Clock, min(f.interval, 5*time.Second)) // metrics; full rounds when due
		select {
		case <-c.stop:
			stop()
			return
		case <-c.m.Changed():
		case <-timer:
		}
		stop()
		c.failMetrics.observeLog(f.log)
		if !c.m.Live() || f.loopPaused.Load() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := f.checkpoint(ctx, nil, true); err != nil { // full when due
			c.s.log.Warn("checkpoint round", "err", err)
		}
		cancel()
	}
}

// ingestMoved is a move target's ingest; with failover the span is
// checkpointed before the source flips the owner (it is in no part of
// this node's log), and no take-over runs meanwhile.
func (c *clusterMember) ingestMoved(ctx context.Context, x *table.SpanExport) error {
	if c.fail == nil {
		return c.s.ingestSpan(ctx, x) // mviewcluster.go
	}
	c.fail.takeMu.Lock()
	defer c.fail.takeMu.Unlock()
	if err := c.s.ingestSpan(ctx, x); err != nil {
		return err
	}
	ref := tableRef{instance: x.Instance, table: x.Table}
	return c.fail.checkpoint(ctx, []ownedSpan{{table: ref.name(), start: x.StartRow, end: x.EndRow}}, false)
}

// mine lists the spans of a table this node serves or is taking (a move's
// target before the flip).
func (f *failover) mine(tableName string) [][2][]byte {
	var out [][2][]byte
	if d, ok := f.c.m.Directory(tableName); ok {
		for _, t := range d.Tablets {
			if t.Owner == f.c.opts.NodeID {
				out = append(out, [2][]byte{t.Start, t.End})
			}
		}
	}
	f.roundMu.Lock()
	for _, p := range f.pending {
		if p.span.table == tableName {
			out = append(out, [2][]byte{p.span.start, p.span.end})
		}
	}
	f.roundMu.Unlock()
	return out
}

// takeOverLoop watches for dead owners and recovers the groups the plan
// gives this node.
func (f *failover) takeOverLoop() {
	c := f.c
	defer c.wg.Done()
	for {
		timer, stop := clock.Timer(c.s.opts.Clock, time.Second) // stopped when another case wins
		select {
		case <-c.stop:
			stop()
			return
		case <-c.m.Changed():
		case <-f.kick:
		case <-timer:
		}
		stop()
		if !c.m.Live() || c.s.opts.Clock.Now().Before(f.grace) || f.takeOversPaused.Load() {
			continue
		}
		dirs := c.m.Directories()
		plan, err := tablets.PlanTakeOvers(c.m.Nodes(), dirs, f.blockedTakers(dirs))
		for _, g := range plan {
			if f.victims[g.Dead] == nil {
				f.victims[g.Dead] = &victim{}
			}
		}
		f.setStep("settle victims")
		f.settleVictims(dirs)
		f.setStep("")
		if err != nil && len(plan) == 0 {
			continue
		}
		for _, g := range plan {
			if g.To != c.opts.NodeID {
				continue
			}
			key := g.Dead + "\x00" + g.Table
			f.failMu.Lock()
			last, failed := f.failures[key]
			f.failMu.Unlock()
			if failed && c.s.opts.Clock.Now().Sub(last) < 2*time.Second {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			f.setStep("take over " + g.Dead + "'s tablets of " + g.Table)
			err := f.takeOver(ctx, g)
			f.setStep("")
			cancel()
			f.failMu.Lock()
			if err != nil {
				f.failures[key] = c.s.opts.Clock.Now()
				c.failMetrics.takeOvers.WithLabelValues("failed").Inc()
			} else {
				delete(f.failures, key)
				c.failMetrics.takeOvers.WithLabelValues("done").Inc()
			}
			f.failMu.Unlock()
			if err != nil {
				c.s.log.Warn("take over a dead node's tablets", "dead", g.Dead, "table", g.Table, "err", err)
				select {
				case f.kick <- struct{}{}:
				default:
				}
			}
			break // the plan changes with each take-over: compute it again
		}
	}
}

// settleVictims gives up the dead nodes whose tablets were all taken
// over: the schema log no longer keeps entries for them (their progress
// marks would hold its trimming back; node drain --force does the same),
// and, ReleaseDeadAfter later, their shared objects are released
// (releaseDead). Every node that planned a node's take-over does it; both
// steps are idempotent.
func (f *failover) settleVictims(dirs []tablets.Directory) {
	c := f.c
	now := c.s.opts.Clock.Now()
	for v, st := range f.victims {
		if _, live := c.m.Node(v); live {
			delete(f.victims, v) // back in time: it keeps what it has
			continue
		}
		if ownsAny(dirs, v) {
			st.empty = time.Time{}
			continue
		}
		if st.empty.IsZero() {
			st.empty = now
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var err error
		if !st.forgot {
			var gone bool
			if gone, err = c.m.ForgetDeadProgress(ctx, v); err == nil && !gone {
				cancel()
				continue // back just now: the next pass sees it live
			}
			if err == nil {
				st.forgot = true
				c.s.log.Info("forgot the schema-log progress of a node whose tablets were all taken over", "node", v)
			}
		}
		after := c.opts.ReleaseDeadAfter
		if after == 0 {
			after = DefaultReleaseDeadAfter
		}
		switch {
		case err != nil:
		case after < 0 || now.Sub(st.empty) < after:
			err = errNotYet
		default:
			err = f.releaseDead(ctx, v, dirs)
		}
		cancel()
		switch {
		case errors.Is(err, errNotYet):
		case err != nil:
			c.s.log.Warn("give up a node whose tablets were taken over", "node", v, "err", err)
		default:
			delete(f.victims, v)
		}
	}
}

// ownsAny reports whether node owns a tablet of dirs.
func ownsAny(dirs []tablets.Directory, node string) bool {
	for _, d := range dirs {
		for _, t := range d.Tablets {
			if t.Owner == node {
				return true
			}
		}
	}
	return false
}

// takeOver recovers one table's tablets of a dead node here and makes
// this node their owner.
func (f *failover) takeOver(ctx context.Context, g tablets.TakeOver) error {
	c := f.c
	start := time.Now()
	ref, err := parseTable(g.Table)
	if err != nil {
		return err
	}
	if c.restoreUnderWay(g.Table) { // clusterrestore.go: nothing to rebuild
		return c.takeOverRestoring(ctx, g)
	}
	cat, ok, err := storage.ReadCatalog(c.store, g.Dead)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("ebbtable: node %s left no commit catalog (it did not run with failover): its tablets wait for it, or for node drain --force", g.Dead)
	}
	tableID := uint64(0)
	if d, ok := c.m.Directory(g.Table); ok {
		tableID = d.TableID
	}
	// The checkpoints that hold rows of the group's tablets (of this
	// incarnation of the table: not one deleted under the name before).
	var entries []storage.CatalogEntry
	var cps []tablets.Checkpointed
	for _, e := range cat.Entries {
		if e.Table != g.Table || (tableID != 0 && e.TableID != tableID) {
			continue
		}
		for _, t := range g.Tablets {
			if tablets.Overlaps(e.StartRow, e.EndRow, t.Start, t.End) {
				entries = append(entries, e)
				cps = append(cps, tablets.Checkpointed{Start: e.StartRow, End: e.EndRow, After: e.After})
				break
			}
		}
	}
	// This node applies the schema log at least as far as the dead node
	// had (it died before the take-over began): every family its
	// checkpoints and log name is known here, as live or dropped.
	f.atStage(g, "catch up with the schema log")
	if err := c.catchUp(ctx); err != nil {
		return err
	}
	f.atStage(g, "wait for moves in")
	// Ingesting a checkpoint replaces its whole span here: it must not
	// reach rows this node serves or is taking (a checkpoint from before a
	// split whose other half came here since). Moves into this node wait.
	f.takeMu.Lock()
	defer f.takeMu.Unlock()
	for _, r := range f.mine(g.Table) {
		for _, e := range entries {
			if tablets.Overlaps(e.StartRow, e.EndRow, r[0], r[1]) {
				return fmt.Errorf("ebbtable: %s's checkpoint [%q, %q) reaches rows [%q, %q) this node serves; give the tablets away by hand (node drain --force)", g.Dead, e.StartRow, e.EndRow, r[0], r[1])
			}
		}
	}
	eng := c.s.engine
	// No schema change applies here from the ingest until the missed
	// drops are applied (dropsMissed): a row-range drop applied meanwhile
	// would be undone by the ingest or the replay, and missed by the
	// check; a family dropped meanwhile would be named by the ingest.
	f.atStage(g, "wait for schema changes")
	c.applyRun.Lock()
	unlockApply := sync.OnceFunc(c.applyRun.Unlock)
	f.atStage(g, "rebuild")
	defer unlockApply()
	m, err := eng.Table(ref.instance, ref.table)
	if err != nil {
		return err
	}
	var groupSpans []table.RowSpan
	for _, t := range g.Tablets {
		groupSpans = append(groupSpans, table.RowSpan{Start: t.Start, End: t.End})
	}
	// The dead node's change-stream records of the tablets, from its
	// checkpoints and log (clusterfailchanges.go).
	rc := &recoveredChanges{spans: groupSpans}
	// Whatever this node holds of the tablets (a copy from an old move) goes.
	for _, t := range g.Tablets {
		if err := eng.ExciseSpan(ctx, ref.instance, ref.table, t.Start, t.End); err != nil {
			return err
		}
	}
	if h := f.stageHook.Load(); h != nil {
		(*h)("excised")
	}
	for _, e := range entries {
		b, err := storage.GetObject(ctx, c.store, e.Object)
		if err != nil {
			return fmt.Errorf("ebbtable: checkpoint %s: %w", e.Object, err)
		}
		x, err := table.UnmarshalSpanExport(b)
		if err != nil {
			return err
		}
		// Families dropped since the checkpoint: their cells come in
		// invisible, and the collector is told to sweep them again.
		dropped := droppedSince(m, x.Families)
		if err := c.s.ingestSpan(ctx, x); err != nil {
			return err
		}
		if len(dropped) > 0 {
			if err := eng.RedropFamilies(ref.instance, ref.table, dropped); err != nil {
				return err
			}
		}
		if e.Tombstones != "" {
			tb, err := storage.GetObject(ctx, c.store, e.Tombstones)
			if err != nil {
				return fmt.Errorf("ebbtable: checkpoint %s: %w", e.Tombstones, err)
			}
			if err := eng.PutTombstones(ref.instance, ref.table, groupSpans, tb); err != nil {
				return err
			}
		}
		if err := rc.fromCheckpoint(ctx, c.store, e); err != nil {
			return err
		}
	}
	pieces := tablets.RecoveryPieces(g.Tablets, cps, cat.Truncated)
	from := uint64(1<<64 - 1)
	for _, p := range pieces {
		from = min(from, p.After)
	}
	records, keys := 0, 0
	// The schema log position the dead node had applied: its catalog's,
	// or a later group's; a DropRowRange logged while it was at T was
	// entry T+1 (entries are applied one at a time, in order).
	// (Read from the truncation point: a drop applied after the catalog's
	// tag was read is logged after it, and must be seen even where a
	// checkpoint already holds its effect.)
	applied, droppedNext := cat.Tag, map[uint64]bool{}
	err = storage.ReadCommitLog(ctx, c.store, g.Dead, min(from, cat.Truncated), func(seq, tag uint64, repr []byte) error {
		applied = max(applied, tag)
		if table.LoggedDrop(repr, tableID) {
			droppedNext[tag+1] = true
		}
		var spans []table.RowSpan
		for _, p := range pieces {
			if seq > p.After {
				spans = append(spans, table.RowSpan{Start: p.Start, End: p.End})
			}
		}
		if len(spans) == 0 {
			return nil
		}
		n, err := eng.ReplayLogged(ref.instance, ref.table, spans, repr)
		records++
		keys += n
		if err != nil {
			return err
		}
		return rc.fromLog(m, spans, repr)
	})
	if err != nil {
		return err
	}
	changeRecords, err := rc.importTo(c, m, g.Table, g.Tablets)
	if err != nil {
		return err
	}
	if err := f.dropsMissed(ctx, ref, g, applied, droppedNext); err != nil {
		return err
	}
	unlockApply()
	// Rows of the checkpoints outside the group belong to other nodes now.
	for _, e := range entries {
		for _, r := range tablets.Outside(e.StartRow, e.EndRow, g.Tablets) {
			if err := eng.ExciseSpan(ctx, ref.instance, ref.table, r[0], r[1]); err != nil {
				return err
			}
		}
	}
	// This node's own catalog covers the tablets before it owns them.
	var spans []ownedSpan
	for _, t := range g.Tablets {
		spans = append(spans, ownedSpan{table: g.Table, start: t.Start, end: t.End})
	}
	f.atStage(g, "checkpoint")
	if err := f.checkpoint(ctx, spans, false); err != nil {
		return err
	}
	f.atStage(g, "flip")
	if h := f.stageHook.Load(); h != nil {
		(*h)("flip")
	}
	if err := c.flipTakeOver(ctx, g); err != nil {
		if errors.Is(err, tablets.ErrConflict) {
			// Surely not flipped: the spans are not this node's, and
			// left pending they would refuse this take-over's retry
			// for a minute (mine: "reaches rows this node serves").
			f.unpend(spans)
		}
		return err
	}
	c.s.log.Info("took over a dead node's tablets", "dead", g.Dead, "table", g.Table, "tablets", len(g.Tablets),
		"checkpoints", len(entries), "log_records", records, "keys", keys, "change_records", changeRecords, "took", time.Since(start))
	return nil
}

// droppedSince removes from an export's families (name → id) those m
// has dropped since (ids are never reused; one above m's next id is not
// known here yet, and stays for IngestSpan to refuse), and returns them
// by id.
func droppedSince(m *table.Meta, fams map[string]uint32) map[uint32]string {
	out := map[uint32]string{}
	for name, id := range fams {
		if f, ok := m.Family(name); ok && f.ID == id {
			continue
		}
		if _, live := m.FamilyByID(id); live || id > m.NextFamilyID {
			continue
		}
		delete(fams, name)
		out[id] = name
	}
	return out
}

// dropsMissed applies to the rebuilt tablets the DropRowRange entries of
// their table that the dead node had not applied (it had applied the
// schema log up to applied, and the entries in done besides) and this
// node has: the node applies later ones itself, in order, as they come.
func (f *failover) dropsMissed(ctx context.Context, ref tableRef, g tablets.TakeOver, applied uint64, done map[uint64]bool) error {
	upTo := f.c.appliedSeq()
	if upTo <= applied {
		return nil
	}
	es, err := f.c.m.Entries(ctx, applied)
	if err != nil {
		return err
	}
	var spans []table.RowSpan
	for _, t := range g.Tablets {
		spans = append(spans, table.RowSpan{Start: t.Start, End: t.End})
	}
	for _, e := range es {
		if e.Seq > upTo {
			break
		}
		if e.Method != "DropRowRange" || e.Table != g.Table || done[e.Seq] {
			continue
		}
		var req adminpb.DropRowRangeRequest
		if err := proto.Unmarshal(e.Request, &req); err != nil {
			return err
		}
		prefix, all := req.GetRowKeyPrefix(), req.GetDeleteAllDataFromTable()
		if err := f.c.s.engine.DropInSpans(ref.instance, ref.table, prefix, all, spans); err != nil {
			return err
		}
		f.c.s.log.Info("applied a row-range drop the dead node had missed to its tablets", "dead", g.Dead, "table", g.Table, "seq", e.Seq)
	}
	return nil
}

// failoverMetrics count the commit log's appends, checkpoint rounds and
// take-overs (zero on a node without failover, so one dashboard fits all).
type failoverMetrics struct {
	logRecords, logObjects, logBytes prometheus.Counter
	rounds                           *prometheus.CounterVec
	takeOvers                        *prometheus.CounterVec
	last                             storage.CommitLogStats
	mu                               sync.Mutex
}

func newFailoverMetrics() failoverMetrics {
	return failoverMetrics{
		logRecords: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbtable_commit_log_records_total",
			Help: "Write batches this node put in its shared commit log before acknowledging them (failover)."}),
		logObjects: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbtable_commit_log_objects_total",
			Help: "Objects (groups of records) this node wrote to its shared commit log (failover)."}),
		logBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbtable_commit_log_bytes_total",
			Help: "Bytes this node wrote to its shared commit log (failover)."}),
		rounds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ebbtable_checkpoint_rounds_total",
			Help: "Checkpoint rounds this node wrote to the shared store, by kind (full, incremental) (failover)."}, []string{"kind"}),
		takeOvers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ebbtable_failover_takeovers_total",
			Help: "Take-overs of a dead node's tablets (one table's worth each) this node ran, by outcome (done, failed)."}, []string{"outcome"}),
	}
}

func (m *failoverMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.logRecords, m.logObjects, m.logBytes, m.rounds, m.takeOvers}
}

// observeLog adds the log's appends since the last call.
func (m *failoverMetrics) observeLog(l *storage.CommitLog) {
	st := l.Stats()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.logRecords.Add(float64(st.Records - m.last.Records))
	m.logObjects.Add(float64(st.Groups - m.last.Groups))
	m.logBytes.Add(float64(st.Bytes - m.last.Bytes))
	m.last = st
}

// blockedTakers rules out, for a dead node's tablets of a table, the nodes
// that serve a tablet one of its checkpoints of that table reaches (a
// checkpoint from before a split whose other half moved on): ingesting
// it there would overwrite their rows. Every node reads the same catalogs
// and directories, so every node rules out the same ones.
func (f *failover) blockedTakers(dirs []tablets.Directory) func(dead, table, node string) bool {
	cats := map[string][]storage.CatalogEntry{}
	dirOf := map[string]tablets.Directory{}
	for _, d := range dirs {
		dirOf[d.Table] = d
	}
	return func(dead, table, node string) bool {
		entries, ok := cats[dead]
		if !ok {
			cat, found, err := storage.ReadCatalog(f.c.store, dead)
			if err == nil && found {
				entries = cat.Entries
			}
			cats[dead] = entries
		}
		d := dirOf[table]
		for _, e := range entries {
			if e.Table != table || e.TableID != d.TableID {
				continue
			}
			reachesDead := false
			for _, t := range d.Tablets {
				if t.Owner == dead && tablets.Overlaps(e.StartRow, e.EndRow, t.Start, t.End) {
					reachesDead = true
					break
				}
			}
			if !reachesDead {
				continue
			}
			for _, t := range d.Tablets {
				if t.Owner == node && tablets.Overlaps(e.StartRow, e.EndRow, t.Start, t.End) {
					return true
				}
			}
		}
		return false
	}
}

// flipTakeOver makes this node the owner of a dead node's tablets in g, in
// the fenced directory flip of a take-over; ErrConflict when one of them
// changed since the take-over was planned.
func (c *clusterMember) flipTakeOver(ctx context.Context, g tablets.TakeOver) error {
	d, ok := c.m.Directory(g.Table)
	if !ok {
		return fmt.Errorf("ebbtable: table %s was dropped", g.Table)
	}
	next := d.Clone()
	for _, t := range g.Tablets {
		ct, i, found := d.Find(t.ID)
		if !found || ct.Owner != g.Dead || !bytes.Equal(ct.Start, t.Start) || !bytes.Equal(ct.End, t.End) {
			return fmt.Errorf("%w: %s changed during its take-over", tablets.ErrConflict, t)
		}
		next.Tablets[i].Owner = c.opts.NodeID
	}
	_, err := c.m.TakeOver(ctx, d, next, g.Dead)
	return err
}
