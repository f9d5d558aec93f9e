package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ebbtable/ebbtable/server/clusterpb"
	"github.com/ebbtable/ebbtable/sqlquery"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Reading a materialized view whose table's tablets are on several nodes
// (mviewcluster.go has how each node maintains its part). The reader
// takes its directory of the table, asks each owner for its state over
// exactly the tablets the directory gives it (ViewPartial: the owner
// catches up with the reader's revision, holds those tablets' gates so no
// move runs meanwhile, brings its state up to now and sends it group by
// group), merges the parts (sqlquery.Merge) and serves the merged groups'
// rows as a node serves its own kept rows, in the same positions. An owner
// whose tablets differ (a move or split since) answers UNAVAILABLE: the
// reader tries again with the new directory, and after three tries
// computes the view from the table (the read's fallback, as before).

// partialTries is how many directories a merged read tries.
const partialTries = 3

// partialChunk is about how many bytes of group states one ViewPartial
// message carries.
const partialChunk = 1 << 20

// ViewPartial serves the Cluster service's ViewPartial.
func (s *clusterService) ViewPartial(req *clusterpb.ViewPartialRequest, stream clusterpb.Cluster_ViewPartialServer) error {
	return s.c.s.viewPartial(stream.Context(), req, stream.Send)
}

// viewPartial is an owner's part of a merged read.
func (s *Server) viewPartial(ctx context.Context, req *clusterpb.ViewPartialRequest, send func(*clusterpb.ViewPartialResponse) error) error {
	c := s.cluster
	if c == nil {
		return status.Error(codes.FailedPrecondition, "ebbtable: not a cluster node")
	}
	ref, err := parseTable(req.GetTable())
	if err != nil {
		return toStatus(err)
	}
	c.catchUpTo(ctx, req.GetRevision())
	changed := func() error { return tabletsChanged(ref, c.opts.NodeID, c.m.Revision()) }
	same := func() bool {
		d, ok := c.m.Directory(ref.name())
		if !ok {
			return false
		}
		var mine []*clusterpb.Tablet
		for _, t := range d.Tablets {
			if t.Owner == c.opts.NodeID {
				mine = append(mine, &clusterpb.Tablet{Id: t.ID, Start: t.Start, End: t.End})
			}
		}
		if len(mine) != len(req.GetTablets()) {
			return false
		}
		for i, t := range mine {
			r := req.GetTablets()[i]
			if t.Id != r.GetId() || !bytes.Equal(t.Start, r.GetStart()) || !bytes.Equal(t.End, r.GetEnd()) {
				return false
			}
		}
		return true
	}
	if !same() {
		return changed()
	}
	var unlock []func()
	release := func() {
		for _, u := range unlock {
			u()
		}
		unlock = nil
	}
	defer release()
	for _, t := range req.GetTablets() {
		g := c.gate(ref.name(), t.GetId())
		g.RLock()
		unlock = append(unlock, g.RUnlock)
	}
	if !same() {
		return changed()
	}
	if !c.m.Live() {
		return status.Errorf(codes.Unavailable, "ebbtable: node %s does not hold its lease now; retry", c.opts.NodeID)
	}
	index, err := s.maintIndex()
	if err != nil {
		return toStatus(err)
	}
	var mv *maintView
	var views []*maintView
	for _, vs := range index {
		for _, v := range vs {
			if v.inst == ref.instance && v.id == req.GetView() {
				mv, views = v, vs
			}
		}
	}
	if mv == nil || !mv.clustered {
		return status.Errorf(codes.FailedPrecondition, "ebbtable: node %s does not maintain view %s over its tablets", c.opts.NodeID, req.GetView())
	}
	if err := s.maintainTable(ctx, mv.meta.ID, views); err != nil {
		return toStatus(err)
	}
	l := s.mviews.tableLock(mv.meta.ID)
	l.Lock()
	snap, err := s.engine.NewViewSnapshot()
	l.Unlock()
	release() // the snapshot holds the state the tablets' rows are in
	if err != nil {
		return toStatus(err)
	}
	defer snap.Close()
	st := snapStore{snap: snap, space: mv.space}
	// The state must cover exactly the tablets asked for (the index was
	// planned with this node's directory, checked above).
	var hb []byte
	if err := st.Scan([]byte{'V'}, []byte{'W'}, false, func(_, v []byte) (bool, error) {
		hb = bytes.Clone(v)
		return false, nil
	}); err != nil {
		return toStatus(err)
	}
	want, wantBytes, err := mv.header()
	if err != nil {
		return toStatus(err)
	}
	if !spansEqual(mv.spans, reqSpans(req.GetTablets())) {
		return changed()
	}
	// The header this plan writes (want's spans, coverageSpans) needs no
	// decoding; another is decoded and its spans compared.
	if !bytes.Equal(hb, wantBytes) {
		if h, ok := decodeHeader(hb); !ok || h.Coverage != coverageSpans || !spansEqual(decodeSpans(h.Spans), decodeSpans(want.Spans)) {
			return changed()
		}
	}
	out := &clusterpb.ViewPartialResponse{}
	size := 0
	each := func(gid []byte) (bool, error) {
		g, err := sqlquery.LoadGroup(st, gid)
		if err != nil || g == nil {
			return false, err
		}
		b, err := mv.ic.Partial(st, gid, g)
		if err != nil {
			return false, err
		}
		out.Groups = append(out.Groups, &clusterpb.ViewGroup{Id: gid, State: b})
		size += len(gid) + len(b)
		if size >= partialChunk {
			if err := send(out); err != nil {
				return false, err
			}
			out, size = &clusterpb.ViewPartialResponse{}, 0
		}
		return true, nil
	}
	if len(req.GetRanges()) > 0 && mv.keyByGroup {
		err = groupsIn(st, req.GetRanges(), each)
	} else {
		err = st.Scan([]byte{'G'}, []byte{'H'}, false, func(k, _ []byte) (bool, error) { return each(bytes.Clone(k[1:])) })
	}
	if err != nil {
		return toStatus(err)
	}
	if len(out.Groups) > 0 {
		return send(out)
	}
	return nil
}

// groupsIn calls each with the groups whose output entry's key falls in
// ranges, and those whose output failed (kept under the empty key), each
// group once.
func groupsIn(st snapStore, ranges []*clusterpb.ViewKeyRange, each func(gid []byte) (bool, error)) error {
	seen := map[string]bool{}
	visit := func(lo, hi []byte) error {
		return st.Scan(lo, hi, false, func(k, _ []byte) (bool, error) {
			gid := outGroup(k)
			if gid == nil || seen[string(gid)] {
				return true, nil
			}
			seen[string(gid)] = true
			return each(gid)
		})
	}
	if err := visit([]byte{'O', 0, 1}, []byte{'O', 0, 2}); err != nil {
		return err
	}
	for _, r := range ranges {
		lo := append([]byte{'O'}, escKey(r.GetStart())...)
		hi := []byte{'P'}
		if !r.GetToEnd() {
			hi = append([]byte{'O'}, escKey(r.GetEnd())...)
		}
		if bytes.Compare(lo, hi) >= 0 {
			continue
		}
		if err := visit(lo, hi); err != nil {
			return err
		}
	}
	return nil
}

// outGroup is the group id of an output entry's key, 'O' · esc(_key) ·
// 0x00 0x01 · group; nil when it is not one.
func outGroup(k []byte) []byte {
	for i := 1; i+1 < len(k); i++ {
		if k[i] != 0 {
			continue
		}
		if k[i+1] == 1 {
			return bytes.Clone(k[i+2:])
		}
		i++ // 0x00 0xFF: an escaped zero
	}
	return nil
}

func reqSpans(ts []*clusterpb.Tablet) []table.RowRange {
	var spans []table.RowRange
	for _, t := range ts {
		spans = appendSpan(spans, t.GetStart(), t.GetEnd())
	}
	return spans
}

func decodeHeader(b []byte) (viewHeader, bool) {
	var h viewHeader
	if b == nil || json.Unmarshal(b, &h) != nil {
		return h, false
	}
	return h, true
}

// snapStore is a view's state in a snapshot, read-only.
type snapStore struct {
	snap  *table.ViewSnapshot
	space []byte
}

func (s snapStore) Get(k []byte) ([]byte, bool, error) {
	var val []byte
	found := false
	err := s.snap.Scan(s.space, k, append(bytes.Clone(k), 0), false, func(_, v []byte) (bool, error) {
		val, found = bytes.Clone(v), true
		return false, nil
	})
	return val, found, err
}

func (s snapStore) Set([]byte, []byte) error { return errors.New("ebbtable: read-only view state") }
func (s snapStore) Delete([]byte) error      { return errors.New("ebbtable: read-only view state") }
func (s snapStore) Scan(lo, hi []byte, reverse bool, fn func(k, v []byte) (bool, error)) error {
	return s.snap.Scan(s.space, lo, hi, reverse, fn)
}

// mergedRow is one merged group's output row, at its position.
type mergedRow struct {
	pos  []byte
	vals []sqlquery.Value
	err  error
}

// scanMerged is scanKept for a view whose table's tablets are on several
// nodes: kept is false (fn not called) when the view is not maintained,
// or when the owners' states could not be had.
func (s *Server) scanMerged(ctx context.Context, inst, id string, ranges []table.RowRange, after []byte, fn func(pos []byte, row []sqlquery.Value) error) (kept bool, err error) {
	mv := s.mergeViewPlan(inst, id)
	if mv == nil {
		return false, nil
	}
	var rows []mergedRow
	for try := 0; ; try++ {
		rows, err = s.mergeParts(ctx, mv, ranges)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if try+1 >= partialTries || status.Code(err) != codes.Unavailable {
			s.mviews.fellBack(err)
			s.log.Debug("materialized view computed on read: its parts could not be merged", "view", id, "err", err)
			return false, nil
		}
		c := s.cluster
		var pe *partsError
		if errors.As(err, &pe) && pe.rev > 0 {
			// An owner's tablets differed from this node's directory: wait
			// for the directory that owner answered from (an owner behind
			// this node catches up again when asked again).
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			c.m.WaitFor(wctx, func() bool { return c.m.Revision() >= pe.rev })
			cancel()
			continue
		}
		// An owner not live or not reached: wait a little for a change
		// (its lease again, or its tablets taken over).
		rev := c.m.Revision()
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		c.m.WaitFor(wctx, func() bool { return c.m.Revision() > rev })
		cancel()
	}
	s.mviews.mergedReads.Add(1)
	slices.SortFunc(rows, func(a, b mergedRow) int { return bytes.Compare(a.pos, b.pos) })
	for _, b := range viewScanBounds(ranges, after) {
		lo, hi := b[0], b[1]
		i, _ := slices.BinarySearchFunc(rows, lo, func(m mergedRow, k []byte) int { return bytes.Compare(m.pos, k) })
		for ; i < len(rows) && bytes.Compare(rows[i].pos, hi) < 0; i++ {
			if err := ctx.Err(); err != nil {
				return true, err
			}
			if rows[i].err != nil {
				return true, fmt.Errorf("%w: %s", sqlquery.ErrInvalid, rows[i].err.Error())
			}
			if err := fn(rows[i].pos, rows[i].vals); err != nil {
				return true, err
			}
		}
	}
	return true, nil
}

// mergeParts asks every owner of the view's table for its part, merges
// them and returns the merged groups' rows.
func (s *Server) mergeParts(ctx context.Context, mv *maintView, ranges []table.RowRange) ([]mergedRow, error) {
	c := s.cluster
	ref := tableRef{instance: mv.inst, table: mv.meta.Name}
	d, ok := c.m.Directory(ref.name())
	if !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: %s is not a cluster table", ref.name())
	}
	rev := c.m.Revision()
	byOwner := map[string][]*clusterpb.Tablet{}
	var owners []string
	for _, t := range d.Tablets {
		if byOwner[t.Owner] == nil {
			owners = append(owners, t.Owner)
		}
		byOwner[t.Owner] = append(byOwner[t.Owner], &clusterpb.Tablet{Id: t.ID, Start: t.Start, End: t.End})
	}
	var keyRanges []*clusterpb.ViewKeyRange
	if mv.keyByGroup {
		for _, r := range ranges {
			keyRanges = append(keyRanges, &clusterpb.ViewKeyRange{Start: r.Start, End: r.End, ToEnd: r.End == nil})
		}
	}
	merge := mv.ic.NewMerge()
	var mu sync.Mutex
	add := func(r *clusterpb.ViewPartialResponse) error {
		mu.Lock()
		defer mu.Unlock()
		for _, g := range r.GetGroups() {
			if err := merge.Add(g.GetId(), g.GetState()); err != nil {
				return err
			}
		}
		return nil
	}
	errs := make([]error, len(owners))
	var wg sync.WaitGroup
	for i, owner := range owners {
		req := &clusterpb.ViewPartialRequest{Table: ref.name(), View: mv.id, Tablets: byOwner[owner], Revision: rev, Ranges: keyRanges}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.askPart(ctx, owner, req, add)
		}()
	}
	wg.Wait()
	if err := partsErr(errs); err != nil {
		return nil, err
	}
	var rows []mergedRow
	err := merge.Output(ctx, s.opts.Clock.Now(), func(gid []byte, vals []sqlquery.Value, err error) error {
		if err != nil {
			rows = append(rows, mergedRow{pos: outKey(nil, gid), err: err})
			return nil
		}
		if k := viewKey(vals[mv.keyAt]); k != nil {
			rows = append(rows, mergedRow{pos: outKey(k, gid), vals: vals})
		}
		return nil
	})
	return rows, err
}

// askPart has one owner (this node or another) send its part.
func (s *Server) askPart(ctx context.Context, owner string, req *clusterpb.ViewPartialRequest, add func(*clusterpb.ViewPartialResponse) error) error {
	c := s.cluster
	if owner == c.opts.NodeID {
		return s.viewPartial(ctx, req, add)
	}
	n, ok := c.m.Node(owner)
	if !ok {
		return status.Errorf(codes.Unavailable, "ebbtable: node %s is down (its lease expired)", owner)
	}
	cc, err := c.conn(n.Addr)
	if err != nil {
		return status.Errorf(codes.Unavailable, "ebbtable: node %s at %s: %v", n.ID, n.Addr, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := clusterpb.NewClusterClient(cc).ViewPartial(clusterForward(ctx), req)
	if err != nil {
		return err
	}
	for {
		r, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := add(r); err != nil {
			return err
		}
	}
}

// partsError is a merged read's try that some owner did not answer: an
// UNAVAILABLE answer if any (the read tries again), else every answer.
type partsError struct {
	err error
	// rev is the newest directory revision an owner whose tablets
	// differed from the read's answered from (tabletsChanged), 0 if none.
	rev int64
	// notLive: every owner that did not answer was not live or not
	// reached (UNAVAILABLE, its tablets not said to differ).
	notLive bool
}

func (e *partsError) Error() string { return e.err.Error() }
func (e *partsError) Unwrap() error { return e.err }

// GRPCStatus is the status of the answer that decides (status.Code).
func (e *partsError) GRPCStatus() *status.Status {
	st, _ := status.FromError(e.err)
	return st
}

func partsErr(errs []error) error {
	pe := &partsError{notLive: true}
	for _, e := range errs {
		if e == nil {
			continue
		}
		rev, changed := changedRevision(e)
		switch {
		case changed:
			pe.notLive = false
			if pe.err == nil || rev > pe.rev {
				pe.err, pe.rev = e, rev
			}
		case status.Code(e) == codes.Unavailable:
			if pe.err == nil {
				pe.err = e
			}
		default:
			pe.notLive = false
		}
	}
	if pe.err == nil {
		if err := errors.Join(errs...); err != nil {
			pe.err = err
		} else {
			return nil
		}
	}
	return pe
}

// tabletsChangedReason marks an owner's answer that the tablets a merged
// read asked it for are not the ones its directory gives it; the answer
// says the revision of that directory.
const tabletsChangedReason = "TABLETS_CHANGED"

func tabletsChanged(ref tableRef, node string, rev int64) error {
	st := status.Newf(codes.Unavailable, "ebbtable: the tablets of %s node %s owns changed; retry", ref.name(), node)
	if ds, err := st.WithDetails(&errdetails.ErrorInfo{Reason: tabletsChangedReason, Domain: "ebbtable",
		Metadata: map[string]string{"revision": strconv.FormatInt(rev, 10)}}); err == nil {
		st = ds
	}
	return st.Err()
}

// changedRevision is the directory revision of a tabletsChanged answer.
func changedRevision(err error) (int64, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetReason() == tabletsChangedReason {
			rev, _ := strconv.ParseInt(ei.GetMetadata()["revision"], 10, 64)
			return rev, true
		}
	}
	return 0, false
}

// fellBack counts a merged read computed on read instead, after err.
func (m *mviews) fellBack(err error) {
	m.mergeFallbacks.Add(1)
	var pe *partsError
	if errors.As(err, &pe) && pe.notLive {
		m.notLiveFallbacks.Add(1)
		return
	}
	msg := err.Error()
	m.lastFallback.Store(&msg)
}
