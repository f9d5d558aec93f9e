package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"hash/fnv"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	tablets "github.com/ebbtable/ebbtable/cluster"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"github.com/ebbtable/ebbtable/table"
	"github.com/prometheus/client_golang/prometheus"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Change streams in cluster mode (docs/change-streams.md, "In a cluster"):
// one partition per tablet. GenerateInitialChangeStreamPartitions answers
// the tablets' row ranges; a ReadChangeStream is served by the owner of the
// tablet holding its partition (any node forwards it there). When that
// tablet splits, merges or moves, the stream ends with an OK CloseStream
// whose new_partitions are the tablets now covering the partition and whose
// continuation_tokens, one per new partition, carry the position reached.
//
// A tablet's records travel with it: before a move flips the owner, the
// source sends the target the records of the span's rows (Cluster/
// IngestChanges), which the target keeps under the same positions, and
// the target raises its commit sequence past the source's. So the owner of
// a tablet can serve any position of its rows within the retention, and a
// token means the same on every node. A reader on the source must not pass
// the point the records were shipped from: the move registers a mark (the
// source's closed timestamp once the tablet's gate is held) before it
// reads them, and readers of the tablet read no further than the mark
// (moveMark), then close there once the directory shows the move.

// nodeTiebreaker is the change-stream tiebreaker of a node: records written
// on different nodes at the same microsecond never share a key, so the
// records a move copies never overwrite the target's own.
func nodeTiebreaker(node string) int32 {
	h := fnv.New32a()
	h.Write([]byte(node))
	if v := int32(h.Sum32() & 0x7fffffff); v != 0 {
		return v
	}
	return 1
}

// moveMark is a move's cap on the readers of the span it moves.
type moveMark struct {
	start, end []byte // the tablet's rows; end empty: no end
	at         int64  // readers of these rows read no records after it
	moved      bool   // the flip happened (else the move is under way)
}

// changeMarks are this node's move marks, by table. A mark of a move that
// failed is dropped; one of a move that happened is kept (a bounded
// number per table) for the readers still on their way to it.
type changeMarks struct {
	mu     sync.Mutex
	marks  map[string][]*moveMark
	notify chan struct{} // closed when a mark is settled

	// afterAhead, when set (tests), runs between a move's two rounds of
	// records, before it takes the tablet's gate.
	afterAhead atomic.Pointer[func()]

	// carried counts records carried between nodes, by path
	// (clusterfailchanges.go).
	carried *prometheus.CounterVec
}

// settled returns a channel closed when the next mark is settled.
func (c *clusterMember) settled() <-chan struct{} {
	cm := &c.changes
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if cm.notify == nil {
		cm.notify = make(chan struct{})
	}
	return cm.notify
}

const maxMarksPerTable = 256

// beginMove registers a mark for a tablet whose gate the move holds.
func (c *clusterMember) beginMove(tableName string, t tablets.Tablet) *moveMark {
	cm := &c.changes
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if cm.marks == nil {
		cm.marks = map[string][]*moveMark{}
	}
	mk := &moveMark{start: t.Start, end: t.End, at: c.s.engine.ClosedTimestamp()}
	cm.marks[tableName] = append(cm.marks[tableName], mk)
	return mk
}

// endMove settles a mark: kept if the move happened, dropped if not.
func (c *clusterMember) endMove(tableName string, mk *moveMark, moved bool) {
	cm := &c.changes
	cm.mu.Lock()
	defer cm.mu.Unlock()
	list := cm.marks[tableName]
	if moved {
		mk.moved = true
		if len(list) > maxMarksPerTable {
			list = append([]*moveMark(nil), list[len(list)-maxMarksPerTable:]...)
		}
	} else {
		for i, m := range list {
			if m == mk {
				list = append(list[:i:i], list[i+1:]...)
				break
			}
		}
	}
	cm.marks[tableName] = list
	if cm.notify != nil {
		close(cm.notify)
		cm.notify = nil
	}
}

// dropMarks forgets the marks of moves of rows [start, end) away from
// here: they are coming back (this node is a move's target), and readers
// of them from now on start past those marks.
func (c *clusterMember) dropMarks(tableName string, start, end []byte) {
	cm := &c.changes
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if len(cm.marks[tableName]) == 0 {
		return
	}
	r := tablets.Range{Start: start, End: end}
	if r.Start == nil {
		r.Start = []byte{}
	}
	list := cm.marks[tableName][:0:0]
	for _, mk := range cm.marks[tableName] {
		if !mk.moved || !csOverlaps(r, tablets.Range{Start: mk.start, End: mk.end}) {
			list = append(list, mk)
		}
	}
	cm.marks[tableName] = list
}

// closedAndCap takes the closed timestamp and, in the same critical section
// as beginMove, the lowest mark a reader of rows r at position from must
// stop at: a move registered after this call marks a closed timestamp at
// least this one.
func (c *clusterMember) closedAndCap(tableName string, r tablets.Range, from changestream.Position) (closed, capAt int64, capped bool) {
	cm := &c.changes
	cm.mu.Lock()
	defer cm.mu.Unlock()
	closed = c.s.engine.ClosedTimestamp()
	for _, mk := range cm.marks[tableName] {
		if !csOverlaps(r, tablets.Range{Start: mk.start, End: mk.end}) || closedPosition(mk.at).Less(from) {
			continue // other rows, or a mark the reader is past
		}
		if !capped || mk.at < capAt {
			capAt, capped = mk.at, true
		}
	}
	return closed, capAt, capped
}

// changeShipment sends a tablet's change-stream records to a move's
// target in two rounds: most of them before the tablet's gate is taken
// (ahead), the rest holding it (finish), so writes wait only for the tail.
type changeShipment struct {
	c      *clusterMember
	table  string // its resource name
	m      *table.Meta
	tablet tablets.Tablet
	client clusterpb.ClusterClient
	lower  []byte // where the next round reads on from
	n      int    // records sent
	bytes  int    // their size (encodings and positions)
}

func (c *clusterMember) newShipment(ref tableRef, t tablets.Tablet, client clusterpb.ClusterClient) (*changeShipment, error) {
	m, err := c.s.engine.Table(ref.instance, ref.table)
	if err != nil {
		return nil, err
	}
	return &changeShipment{c: c, table: ref.name(), m: m, tablet: t, client: client, lower: changestream.TableStart(m.ID)}, nil
}

// ahead sends the records up to the closed timestamp now, before the
// gate: they are final. Records a move that then fails leaves on the
// target are harmless: the target serves them only for a tablet it owns,
// and a later move of it sends them again, unchanged.
func (sh *changeShipment) ahead(ctx context.Context) error {
	err := sh.send(ctx, sh.c.s.engine.ClosedTimestamp(), 0)
	if h := sh.c.changes.afterAhead.Load(); h != nil && err == nil {
		(*h)()
	}
	return err
}

// finish runs holding the tablet's gate after the export: it sends the
// records of the tablet's rows up to the commit timestamp the export was
// read at (exported, table.SpanExport.CommitHighWater), which the export
// holds exactly: a deletion by the collector committed later is neither in
// the export nor shipped, and the target's own collector makes it (and
// records it) again. The target's sequence is raised past the last commit
// timestamp handed out here, so the rows' later records follow every one
// a reader on this node may have seen.
func (sh *changeShipment) finish(ctx context.Context, t tablets.Tablet, exported int64) error {
	if !bytes.Equal(t.Start, sh.tablet.Start) || !bytes.Equal(t.End, sh.tablet.End) {
		// The tablet changed between the rounds (a merge): start over.
		sh.tablet, sh.lower = t, changestream.TableStart(sh.m.ID)
	}
	return sh.send(ctx, exported, max(exported, sh.c.s.engine.CommitHighWater()))
}

// send ships the records of the tablet's rows from sh.lower up to upTo,
// about 1 MiB per call; the last call carries observe.
func (sh *changeShipment) send(ctx context.Context, upTo, observe int64) error {
	req := &clusterpb.IngestChangesRequest{Table: sh.table, Start: sh.tablet.Start, End: sh.tablet.End}
	if sh.m.ChangeStream != nil && upTo >= 0 {
		size := 0
		for {
			recs, next, more, err := sh.c.s.engine.SpanChanges(sh.m, sh.lower, upTo, sh.tablet.Start, sh.tablet.End, 4096)
			if err != nil {
				return err
			}
			for _, r := range recs {
				enc := r.Encode()
				req.Records = append(req.Records, &clusterpb.ChangeRecord{Commit: r.Commit, Tiebreaker: r.Tiebreaker, Index: r.Index, Record: enc})
				size += len(enc) + 32
				sh.bytes += len(enc) + 16
				if size >= 1<<20 {
					if _, err := sh.client.IngestChanges(ctx, req); err != nil {
						return err
					}
					sh.n += len(req.Records)
					sh.c.changes.carried.WithLabelValues("move").Add(float64(len(req.Records)))
					req.Records, size = nil, 0
				}
			}
			if !more {
				break
			}
			sh.lower = next
		}
		sh.lower = changestream.After(sh.m.ID, closedPosition(upTo))
	}
	if len(req.Records) == 0 && observe == 0 {
		return nil
	}
	req.Observe = observe
	if _, err := sh.client.IngestChanges(ctx, req); err != nil {
		return err
	}
	sh.n += len(req.Records)
	sh.c.changes.carried.WithLabelValues("move").Add(float64(len(req.Records)))
	return nil
}

// IngestChanges keeps a move's change-stream records (the target's half).
func (s *clusterService) IngestChanges(ctx context.Context, req *clusterpb.IngestChangesRequest) (*clusterpb.IngestChangesResponse, error) {
	ref, err := parseTable(req.GetTable())
	if err != nil {
		return nil, toStatus(err)
	}
	m, err := s.c.s.engine.Table(ref.instance, ref.table)
	if err != nil {
		return nil, toStatus(err)
	}
	recs := make([]changestream.Record, 0, len(req.GetRecords()))
	for _, r := range req.GetRecords() {
		rec, err := changestream.Decode(r.GetRecord())
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: change record: %v", err)
		}
		rec.Position = changestream.Position{Commit: r.GetCommit(), Tiebreaker: r.GetTiebreaker(), Index: r.GetIndex()}
		recs = append(recs, rec)
	}
	s.c.dropMarks(ref.name(), req.GetStart(), req.GetEnd())
	defer s.c.changesImported() // clusterfailchanges.go: once the records are in
	if err := s.c.s.engine.ImportChanges(m, recs); err != nil {
		return nil, toStatus(err)
	}
	s.c.s.engine.ObserveCommit(req.GetObserve())
	return &clusterpb.IngestChangesResponse{}, nil
}

// ---- partitions, positions and tokens ----

func csOverlaps(a, b tablets.Range) bool {
	return (len(b.End) == 0 || bytes.Compare(a.Start, b.End) < 0) && (len(a.End) == 0 || bytes.Compare(b.Start, a.End) < 0)
}

// within says whether a lies inside b.
func csWithin(a, b tablets.Range) bool {
	return bytes.Compare(a.Start, b.Start) >= 0 && (len(b.End) == 0 || (len(a.End) > 0 && bytes.Compare(a.End, b.End) <= 0))
}

func csIntersect(a, b tablets.Range) tablets.Range {
	r := a
	if bytes.Compare(b.Start, r.Start) > 0 {
		r.Start = b.Start
	}
	if len(r.End) == 0 || (len(b.End) > 0 && bytes.Compare(b.End, r.End) < 0) {
		r.End = b.End
	}
	return r
}

func csInRange(k []byte, r tablets.Range) bool {
	return bytes.Compare(k, r.Start) >= 0 && (len(r.End) == 0 || bytes.Compare(k, r.End) < 0)
}

func partitionRange(p *btpb.StreamPartition) tablets.Range {
	if p.GetRowRange() == nil {
		return tablets.Range{Start: []byte{}}
	}
	return toRanges([]*btpb.RowRange{p.GetRowRange()})[0]
}

func streamPartition(r tablets.Range) *btpb.StreamPartition {
	return &btpb.StreamPartition{RowRange: fromRange(r)}
}

// csPiece is part of a partition and the position its rows were read to.
type csPiece struct {
	r   tablets.Range
	pos changestream.Position
}

// csState is where a partition's reader stands: contiguous pieces in key
// order, each read to its own position (a partition made of several
// parents, merged, starts with each parent's). Once the reader's position
// passes every piece's, the state is one position.
type csState []csPiece

func (st csState) min() changestream.Position {
	p := st[0].pos
	for _, x := range st[1:] {
		if x.pos.Less(p) {
			p = x.pos
		}
	}
	return p
}

// advance records that every record up to q has been read.
func (st csState) advance(q changestream.Position) {
	for i := range st {
		if st[i].pos.Less(q) {
			st[i].pos = q
		}
	}
}

// wants says whether the record of row key at position p is to be sent.
func (st csState) wants(key []byte, p changestream.Position) bool {
	for _, x := range st {
		if csInRange(key, x.r) {
			return x.pos.Less(p)
		}
	}
	return false
}

// restrict is the state of the rows of r.
func (st csState) restrict(r tablets.Range) csState {
	var out csState
	for _, x := range st {
		if csOverlaps(x.r, r) {
			out = append(out, csPiece{r: csIntersect(x.r, r), pos: x.pos})
		}
	}
	return out
}

type tokenPiece struct {
	Start []byte `json:"s"`
	Pos   string `json:"p"`
}

// token encodes the state: one position ("v1.…") when the pieces agree,
// else "v2." and the pieces' starts and positions (base64 of JSON).
func (st csState) token() string {
	var ps []tokenPiece
	for i, x := range st {
		if i > 0 && x.pos == st[i-1].pos {
			continue
		}
		ps = append(ps, tokenPiece{Start: x.r.Start, Pos: x.pos.Token()})
	}
	if len(ps) == 1 {
		return ps[0].Pos
	}
	b, _ := json.Marshal(ps)
	return "v2." + base64.RawURLEncoding.EncodeToString(b)
}

var errBadPieces = errors.New("ebbtable: the continuation tokens' partitions must cover the partition read, without overlap")

// parseTokenPieces reads one continuation token for rows r.
func parseTokenPieces(tok string, r tablets.Range) (csState, error) {
	if !strings.HasPrefix(tok, "v2.") {
		p, err := changestream.ParseToken(tok)
		if err != nil {
			return nil, err
		}
		return csState{{r: r, pos: p}}, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok[3:])
	var ps []tokenPiece
	if err == nil {
		err = json.Unmarshal(b, &ps)
	}
	if err != nil || len(ps) == 0 {
		return nil, changestream.ErrBadToken
	}
	var st csState
	for i, x := range ps {
		p, err := changestream.ParseToken(x.Pos)
		if err != nil {
			return nil, err
		}
		pr := tablets.Range{Start: x.Start, End: r.End}
		if i+1 < len(ps) {
			pr.End = ps[i+1].Start
		}
		if i == 0 {
			pr.Start = r.Start
		}
		if pr.Start == nil {
			pr.Start = []byte{}
		}
		if !csWithin(pr, r) || (len(pr.End) > 0 && bytes.Compare(pr.Start, pr.End) >= 0) {
			return nil, changestream.ErrBadToken
		}
		st = append(st, csPiece{r: pr, pos: p})
	}
	return st, nil
}

// combine orders pieces and checks they cover r exactly.
func combine(st csState, r tablets.Range) (csState, error) {
	sort.Slice(st, func(i, j int) bool { return bytes.Compare(st[i].r.Start, st[j].r.Start) < 0 })
	if len(st) == 0 || !bytes.Equal(st[0].r.Start, r.Start) {
		return nil, errBadPieces
	}
	for i := range st {
		last := i == len(st)-1
		if last {
			if !bytes.Equal(st[i].r.End, r.End) {
				return nil, errBadPieces
			}
			break
		}
		if len(st[i].r.End) == 0 || !bytes.Equal(st[i].r.End, st[i+1].r.Start) {
			return nil, errBadPieces
		}
	}
	return st, nil
}

// ---- the Data API's change-stream methods in cluster mode ----

// GenerateInitialChangeStreamPartitions answers one partition per tablet.
func (x *clusterData) GenerateInitialChangeStreamPartitions(req *btpb.GenerateInitialChangeStreamPartitionsRequest, stream btpb.Bigtable_GenerateInitialChangeStreamPartitionsServer) error {
	ref, err := parseTable(req.GetTableName())
	if err != nil {
		return x.dataServer.GenerateInitialChangeStreamPartitions(req, stream)
	}
	d, ok := x.c.directory(stream.Context(), ref)
	if !ok {
		return x.dataServer.GenerateInitialChangeStreamPartitions(req, stream)
	}
	if _, err := x.s.streamedTable(ref); err != nil {
		return err
	}
	for _, t := range d.Tablets {
		if err := stream.Send(&btpb.GenerateInitialChangeStreamPartitionsResponse{Partition: streamPartition(tablets.Range{Start: t.Start, End: t.End})}); err != nil {
			return err
		}
	}
	return nil
}

// ReadChangeStream serves a partition on its tablet's owner.
func (x *clusterData) ReadChangeStream(req *btpb.ReadChangeStreamRequest, stream btpb.Bigtable_ReadChangeStreamServer) error {
	handled, err := x.readPartition(stream.Context(), req, dataSink{x: x, stream: stream}, func(ctx context.Context, cc *grpc.ClientConn) error {
		return pipeChanges(btpb.NewBigtableClient(cc).ReadChangeStream(ctx, req))(stream)
	})
	if !handled {
		return x.dataServer.ReadChangeStream(req, stream)
	}
	return err
}

// readPartition serves a partition to out on its tablet's owner, or hands
// the call to forward with the owner's connection and the forwarded
// call's context. It does not handle (false) a table outside the cluster.
func (x *clusterData) readPartition(ctx context.Context, req *btpb.ReadChangeStreamRequest, out changeSink, forward func(context.Context, *grpc.ClientConn) error) (bool, error) {
	ref, err := parseTable(req.GetTableName())
	if err != nil {
		return false, nil
	}
	d, ok := x.c.directory(ctx, ref)
	if !ok {
		return false, nil
	}
	return true, x.servePartition(ctx, req, ref, d, out, forward)
}

// servePartition reads a partition of a table in the cluster here, or
// forwards the call to its tablet's owner.
func (x *clusterData) servePartition(ctx context.Context, req *btpb.ReadChangeStreamRequest, ref tableRef, d tablets.Directory, out changeSink, forward func(context.Context, *grpc.ClientConn) error) error {
	m, err := x.s.streamedTable(ref)
	if err != nil {
		return err
	}
	part := partitionRange(req.GetPartition())
	if len(part.End) > 0 && bytes.Compare(part.Start, part.End) >= 0 {
		return status.Error(codes.InvalidArgument, "ebbtable: empty change stream partition")
	}
	hb := defaultHeartbeat
	if h := req.GetHeartbeatDuration(); h != nil {
		if !h.IsValid() || h.AsDuration() <= 0 {
			return status.Error(codes.InvalidArgument, "ebbtable: heartbeat_duration must be positive")
		}
		hb = h.AsDuration()
	}
	var end int64
	if et := req.GetEndTime(); et != nil {
		end = clock.Micros(et.AsTime())
	}
	now := clock.Micros(x.s.opts.Clock.Now())
	var st csState
	switch from := req.GetStartFrom().(type) {
	case *btpb.ReadChangeStreamRequest_StartTime:
		start := clock.Micros(from.StartTime.AsTime())
		if err := x.s.startAt(m, start); err != nil {
			return err
		}
		st = csState{{r: part, pos: closedPosition(start - 1)}}
	case *btpb.ReadChangeStreamRequest_ContinuationTokens:
		for _, tok := range from.ContinuationTokens.GetTokens() {
			ps, err := parseTokenPieces(tok.GetToken(), partitionRange(tok.GetPartition()))
			if err != nil {
				return status.Error(codes.InvalidArgument, err.Error())
			}
			st = append(st, ps...)
		}
		if st, err = combine(st, part); err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		if st.min().Commit+1 < m.ChangeStream.Horizon(now) {
			return status.Error(codes.OutOfRange, "ebbtable: continuation tokens point before the oldest retained change")
		}
	default:
		st = csState{{r: part, pos: closedPosition(now - 1)}}
	}
	// The partition is served where its tablet is; a partition no longer
	// in one tablet (split or merged since it was handed out) is closed
	// at once, with the tablets that now cover it.
	i := d.Locate(part.Start)
	t := d.Tablets[i]
	if !csWithin(part, tablets.Range{Start: t.Start, End: t.End}) {
		return sendClose(out, d, part, st)
	}
	if t.Owner != x.c.opts.NodeID {
		if forwardedRev(ctx) >= 0 {
			return status.Errorf(codes.Unavailable, "ebbtable: %s is not owned by node %s (forwarded); retry", t, x.c.opts.NodeID)
		}
		n, ok := x.c.m.Node(t.Owner)
		if !ok {
			return status.Errorf(codes.Unavailable, "ebbtable: %s: its node is down (its lease expired); retry when it is back", t)
		}
		cc, err := x.c.conn(n.Addr)
		if err != nil {
			return status.Errorf(codes.Unavailable, "ebbtable: node %s at %s: %v", n.ID, n.Addr, err)
		}
		x.c.forwarded.WithLabelValues("ReadChangeStream").Inc()
		return forward(x.c.outgoing(x.dataServer, ctx, x.c.m.Revision()), cc)
	}
	r := &partitionReader{x: x, ref: ref, m: m, part: part, tablet: t, st: st, end: end, hb: hb}
	return r.run(ctx, out)
}

func pipeChanges(cs btpb.Bigtable_ReadChangeStreamClient, err error) func(btpb.Bigtable_ReadChangeStreamServer) error {
	return func(stream btpb.Bigtable_ReadChangeStreamServer) error {
		if err != nil {
			return err
		}
		for {
			resp, err := cs.Recv()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
	}
}

// sendClose ends a partition's stream: OK, the tablets now covering it as
// new partitions, and for each the token of its rows in the partition.
func sendClose(out changeSink, d tablets.Directory, part tablets.Range, st csState) error {
	cl := &btpb.ReadChangeStreamResponse_CloseStream{Status: &rpcstatus.Status{Code: int32(codes.OK)}}
	for _, t := range d.Tablets {
		tr := tablets.Range{Start: t.Start, End: t.End}
		if tr.Start == nil {
			tr.Start = []byte{}
		}
		if !csOverlaps(tr, part) {
			continue
		}
		mine := csIntersect(part, tr)
		cl.NewPartitions = append(cl.NewPartitions, streamPartition(tr))
		cl.ContinuationTokens = append(cl.ContinuationTokens, &btpb.StreamContinuationToken{
			Partition: streamPartition(mine), Token: st.restrict(mine).token()})
	}
	return out.closeStream(cl)
}

// partitionScan is how many records of other partitions a partition's
// reader skips in one read (they are not decoded) before it looks at its
// context, the directory and the marks again.
const partitionScan = 16 * readBatch

// partitionReader serves one partition on its tablet's owner.
type partitionReader struct {
	x      *clusterData
	ref    tableRef
	m      *table.Meta
	part   tablets.Range
	tablet tablets.Tablet // the tablet holding the partition, as served
	st     csState
	end    int64 // inclusive end time, 0 = none
	hb     time.Duration
}

// same says whether d still gives the partition's tablet to this node as
// it was.
func (r *partitionReader) same(d tablets.Directory) bool {
	t := d.Tablets[d.Locate(r.part.Start)]
	return t.ID == r.tablet.ID && t.Owner == r.tablet.Owner && bytes.Equal(t.Start, r.tablet.Start) && bytes.Equal(t.End, r.tablet.End)
}

func (r *partitionReader) run(ctx context.Context, out changeSink) error {
	s, c := r.x.s, r.x.c
	clk := s.opts.Clock
	q := r.st.min() // everything up to q has been read
	lower := changestream.After(r.m.ID, q)
	nextBeat := clk.Now().Add(r.hb)
	sendEnd := func() error {
		return out.closeStream(&btpb.ReadChangeStreamResponse_CloseStream{Status: &rpcstatus.Status{Code: int32(codes.OK)}})
	}
	for {
		if err := ctx.Err(); err != nil {
			return toStatus(err)
		}
		notify := s.engine.ChangesNotify()
		m, err := s.streamedTable(r.ref)
		if err != nil {
			return err
		}
		if m.ID != r.m.ID {
			return status.Errorf(codes.NotFound, "ebbtable: table %s was deleted", r.ref.table)
		}
		// The directory first, then the closed timestamp and the marks: a
		// move flips after registering its mark, so a change seen here
		// that is a move comes with its mark.
		dirCh, marksCh := c.m.Changed(), c.settled()
		d, ok := c.m.Directory(r.ref.name())
		if !ok {
			return status.Errorf(codes.NotFound, "ebbtable: table %s was deleted", r.ref.table)
		}
		changed := !r.same(d)
		closed, capAt, capped := c.closedAndCap(r.ref.name(), r.part, r.st.min())
		upTo := closed
		if capped && capAt < upTo {
			upTo = capAt
		}
		// Only the partition's records are decoded (the log holds every
		// tablet of the node's): wants does not change as the reader
		// advances within the batch, as advancing to a record's
		// predecessor leaves a piece before the record iff it was. The
		// read stops at the end time: past it the stream ends.
		readTo := upTo
		if r.end > 0 && r.end < readTo {
			readTo = r.end
		}
		b, err := s.engine.ReadRowChanges(m, lower, readTo, readBatch, partitionScan, r.st.wants)
		if err != nil {
			return toStatus(err)
		}
		for _, rec := range b.Records {
			q = rec.Position
			r.st.advance(q)
			if err := out.record(rec, r.part, r.st); err != nil {
				return err
			}
		}
		if b.Examined > 0 {
			q = b.Last
			r.st.advance(q)
			lower = changestream.After(m.ID, q)
		}
		if b.Full {
			continue
		}
		if cp := closedPosition(readTo); q.Less(cp) {
			q = cp
			r.st.advance(cp)
			lower = changestream.After(m.ID, cp)
		}
		if r.end > 0 && upTo >= r.end {
			return sendEnd()
		}
		if changed && (!capped || upTo >= capAt) {
			// Everything of the partition's rows this node will ever
			// hold for the old tablet has been sent.
			return sendClose(out, d, r.part, r.st)
		}
		now := clk.Now()
		if !now.Before(nextBeat) {
			if err := out.heartbeat(r.part, r.st, q.Commit); err != nil {
				return err
			}
			nextBeat = now.Add(r.hb)
		}
		wait := nextBeat.Sub(now)
		if r.end > 0 {
			if untilEnd := time.UnixMicro(r.end + 1).Sub(now); untilEnd < wait {
				wait = max(untilEnd, time.Millisecond)
			}
		}
		timer, stop := clock.Timer(clk, wait) // stopped when another case wins
		select {
		case <-ctx.Done():
			stop()
			return toStatus(ctx.Err())
		case <-s.stopping:
			stop()
			return status.Error(codes.Unavailable, "ebbtable: server shutting down; resume from the last token")
		case <-notify:
		case <-dirCh: // a split, merge or move shows here
		case <-marksCh: // a move ended
		case <-timer:
		}
		stop()
	}
}

// changeSink is where a partition's reader sends what it reads: the Data
// API's ReadChangeStream messages (dataSink), or EbbAdmin/Watch's JSON
// lines (watchSink, changewatch.go).
type changeSink interface {
	// record sends a record of the partition; st is the reader's state
	// after it.
	record(rec changestream.Record, part tablets.Range, st csState) error
	// heartbeat says every record up to st has been read, and low is the
	// low watermark (commit micros).
	heartbeat(part tablets.Range, st csState, low int64) error
	closeStream(cl *btpb.ReadChangeStreamResponse_CloseStream) error
}

// dataSink sends a partition's stream as the Data API's ReadChangeStream.
type dataSink struct {
	x      *clusterData
	stream btpb.Bigtable_ReadChangeStreamServer
}

func (o dataSink) record(rec changestream.Record, _ tablets.Range, st csState) error {
	dcs := o.x.dataChanges(rec)
	dcs[len(dcs)-1].Token = st.token()
	for _, dc := range dcs {
		if err := o.stream.Send(&btpb.ReadChangeStreamResponse{StreamRecord: &btpb.ReadChangeStreamResponse_DataChange_{DataChange: dc}}); err != nil {
			return err
		}
	}
	return nil
}

func (o dataSink) heartbeat(part tablets.Range, st csState, low int64) error {
	return o.stream.Send(&btpb.ReadChangeStreamResponse{StreamRecord: &btpb.ReadChangeStreamResponse_Heartbeat_{
		Heartbeat: &btpb.ReadChangeStreamResponse_Heartbeat{
			ContinuationToken:     &btpb.StreamContinuationToken{Partition: streamPartition(part), Token: st.token()},
			EstimatedLowWatermark: timestamppb.New(time.UnixMicro(low))}}})
}

func (o dataSink) closeStream(cl *btpb.ReadChangeStreamResponse_CloseStream) error {
	return o.stream.Send(&btpb.ReadChangeStreamResponse{StreamRecord: &btpb.ReadChangeStreamResponse_CloseStream_{CloseStream: cl}})
}
