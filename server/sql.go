package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash"
	"hash/crc32"
	"hash/fnv"
	"time"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/sqlquery"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Bigtable SQL on the data API: PrepareQuery and ExecuteQuery.
//
// A prepared query is stateless: "ebq1", the time it is valid until (Unix
// nanoseconds), a fingerprint of its result metadata, and the
// PrepareQueryRequest itself. ExecuteQuery plans it again against the
// schema as it is; a plan past its time, or whose metadata changed (a
// family added or dropped, a table or view gone), answers
// FAILED_PRECONDITION with a PREPARED_QUERY_EXPIRED violation, and the
// client prepares again.
//
// Results stream as ProtoRows batches of whole rows (about batchBytes
// each), sent in pieces of at most pieceBytes; the last piece of a batch
// carries the batch's CRC32C and a resume token. For a plan whose rows
// come one per table row in key order (sqlquery's Resumable) the token
// names the row key of the last row delivered and a retry scans after
// it, so rows written or deleted in between are neither repeated nor
// skipped; for others it is the number of rows delivered so far and a
// retry skips that many rows of the re-run query. Every stream ends with
// a token, even an empty result.

const (
	preparedMagic = "ebq1"
	// resumeKeyMagic starts a resumable plan's token: the count, then the
	// row key (or kept view position) of the last row delivered.
	resumeKeyMagic = "ebk1"
	// resumePosMagic starts a positioned plan's token: a
	// sqlquery.Position.
	resumePosMagic = "ebp1"
	// resumeCountMagic starts the token of a plan with no position: the
	// count of rows delivered and the FNV-64a hash of their encodings.
	resumeCountMagic = "ebr2"
	// preparedTTL is how long a prepared query stays valid.
	preparedTTL = time.Hour
	batchBytes  = 1 << 20
	batchRows   = 10000
	pieceBytes  = 256 << 10
	// maxSQLBytes bounds a query's text.
	maxSQLBytes = 1 << 20
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

func metadataProto(cols []sqlquery.Column) *btpb.ResultSetMetadata {
	ps := &btpb.ProtoSchema{}
	for _, c := range cols {
		ps.Columns = append(ps.Columns, &btpb.ColumnMetadata{Name: c.Name, Type: typeToProto(c.Type)})
	}
	return &btpb.ResultSetMetadata{Schema: &btpb.ResultSetMetadata_ProtoSchema{ProtoSchema: ps}}
}

func fingerprint(md *btpb.ResultSetMetadata) uint64 {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(md)
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

func paramTypes(in map[string]*btpb.Type) (map[string]*sqlquery.Type, error) {
	out := map[string]*sqlquery.Type{}
	for name, pt := range in {
		t, err := typeFromProto(pt)
		if err != nil {
			return nil, err
		}
		out[name] = t
	}
	return out, nil
}

// prepare plans a PrepareQueryRequest.
func (d *dataServer) prepare(req *btpb.PrepareQueryRequest) (*sqlquery.Plan, sqlquery.EngineCatalog, error) {
	inst, err := parseInstance(req.GetInstanceName())
	if err != nil {
		return nil, sqlquery.EngineCatalog{}, toStatus(err)
	}
	if len(req.GetQuery()) > maxSQLBytes {
		return nil, sqlquery.EngineCatalog{}, status.Errorf(codes.InvalidArgument, "ebbtable: query is longer than %d bytes", maxSQLBytes)
	}
	pts, err := paramTypes(req.GetParamTypes())
	if err != nil {
		return nil, sqlquery.EngineCatalog{}, sqlStatus(err)
	}
	cat := d.s.catalog(inst)
	d.s.clusterSQL(&cat) // server/clustersql.go
	plan, err := sqlquery.Prepare(cat, req.GetQuery(), pts)
	if err != nil {
		return nil, cat, sqlStatus(err)
	}
	return plan, cat, nil
}

func (d *dataServer) PrepareQuery(ctx context.Context, req *btpb.PrepareQueryRequest) (*btpb.PrepareQueryResponse, error) {
	inst, err := parseInstance(req.GetInstanceName())
	if err != nil {
		return nil, toStatus(err)
	}
	if resp, handled, err := routeUnary(d, ctx, inst, req.GetAppProfileId(), false, nil,
		func(ctx context.Context, c btpb.BigtableClient) (*btpb.PrepareQueryResponse, error) {
			return c.PrepareQuery(ctx, req)
		}); handled {
		return resp, err
	}
	if req.GetProtoFormat() == nil {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: PrepareQuery needs data_format proto_format")
	}
	plan, _, err := d.prepare(req)
	if err != nil {
		return nil, err
	}
	md := metadataProto(plan.Columns)
	until := d.s.opts.Clock.Now().Add(preparedTTL)
	body, err := proto.Marshal(&btpb.PrepareQueryRequest{InstanceName: req.GetInstanceName(), Query: req.GetQuery(), ParamTypes: req.GetParamTypes()})
	if err != nil {
		return nil, status.Errorf(codes.Internal, "ebbtable: encode prepared query: %v", err)
	}
	tok := append([]byte(preparedMagic), make([]byte, 16)...)
	binary.BigEndian.PutUint64(tok[4:], uint64(until.UnixNano()))
	binary.BigEndian.PutUint64(tok[12:], fingerprint(md))
	tok = append(tok, body...)
	return &btpb.PrepareQueryResponse{Metadata: md, PreparedQuery: tok, ValidUntil: timestamppb.New(until)}, nil
}

// expired is the error the client answers by preparing again.
func expired(msg string) error {
	st := status.New(codes.FailedPrecondition, "ebbtable: prepared query expired: "+msg)
	if ds, err := st.WithDetails(&errdetails.PreconditionFailure{Violations: []*errdetails.PreconditionFailure_Violation{{
		Type: "PREPARED_QUERY_EXPIRED", Description: msg,
	}}}); err == nil {
		st = ds
	}
	return st.Err()
}

// execSetup is a query ready to run: the plan, its catalog and parameters.
type execSetup struct {
	plan   *sqlquery.Plan
	cat    sqlquery.EngineCatalog
	params map[string]sqlquery.Value
	md     *btpb.ResultSetMetadata // sent first on the deprecated query path
}

func (d *dataServer) setupExecute(req *btpb.ExecuteQueryRequest) (*execSetup, error) {
	inst, err := parseInstance(req.GetInstanceName())
	if err != nil {
		return nil, toStatus(err)
	}
	hasPrepared, hasQuery := len(req.GetPreparedQuery()) > 0, req.GetQuery() != ""
	if hasPrepared == hasQuery {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: ExecuteQuery needs exactly one of prepared_query and query")
	}
	if len(req.GetViewParameters()) > 0 {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: view_parameters are not supported")
	}
	x := &execSetup{}
	if hasPrepared {
		if req.GetDataFormat() != nil {
			return nil, status.Error(codes.InvalidArgument, "ebbtable: data_format must be empty with prepared_query")
		}
		tok := req.GetPreparedQuery()
		if len(tok) < 20 || string(tok[:4]) != preparedMagic {
			return nil, status.Error(codes.InvalidArgument, "ebbtable: prepared_query was not made by this server")
		}
		until := time.Unix(0, int64(binary.BigEndian.Uint64(tok[4:])))
		fp := binary.BigEndian.Uint64(tok[12:])
		pq := &btpb.PrepareQueryRequest{}
		if err := proto.Unmarshal(tok[20:], pq); err != nil {
			return nil, status.Error(codes.InvalidArgument, "ebbtable: prepared_query is damaged")
		}
		if pq.GetInstanceName() != inst {
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: prepared_query belongs to instance %s, not %s", pq.GetInstanceName(), inst)
		}
		// A retry with a resume token continues a stream whose rows the
		// client already has: the plan must not change under it, so it
		// is not expired by time, and a schema change that altered its
		// result fails it without asking the client to prepare again
		// (the client prepares again only before its first token).
		stale := expired
		if len(req.GetResumeToken()) > 0 {
			stale = func(msg string) error {
				return status.Error(codes.FailedPrecondition, "ebbtable: the query cannot resume: "+msg+"; run it again")
			}
		} else if !d.s.opts.Clock.Now().Before(until) {
			return nil, expired("valid until " + until.UTC().Format(time.RFC3339Nano))
		}
		plan, cat, err := d.prepare(pq)
		if err != nil {
			return nil, stale("the query no longer plans against the schema: " + status.Convert(err).Message())
		}
		if fingerprint(metadataProto(plan.Columns)) != fp {
			return nil, stale("the schema changed since the query was prepared")
		}
		x.plan, x.cat = plan, cat
	} else {
		if _, ok := req.GetDataFormat().(*btpb.ExecuteQueryRequest_ProtoFormat); !ok {
			return nil, status.Error(codes.InvalidArgument, "ebbtable: ExecuteQuery with query needs data_format proto_format")
		}
		types := map[string]*btpb.Type{}
		for name, v := range req.GetParams() {
			if v.GetType() == nil {
				return nil, status.Errorf(codes.InvalidArgument, "ebbtable: parameter @%s needs a type", name)
			}
			types[name] = v.GetType()
		}
		plan, cat, err := d.prepare(&btpb.PrepareQueryRequest{InstanceName: inst, Query: req.GetQuery(), ParamTypes: types})
		if err != nil {
			return nil, err
		}
		x.plan, x.cat, x.md = plan, cat, metadataProto(plan.Columns)
	}
	x.params = map[string]sqlquery.Value{}
	for name, v := range req.GetParams() {
		t, ok := x.plan.Params[name]
		if !ok {
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: parameter @%s was not declared when the query was prepared", name)
		}
		if v.GetType() != nil {
			vt, err := typeFromProto(v.GetType())
			if err != nil || !vt.Equal(t) {
				return nil, status.Errorf(codes.InvalidArgument, "ebbtable: parameter @%s has type %v, prepared as %s", name, v.GetType(), t)
			}
		}
		val, err := valueFromProto(v, t)
		if err != nil {
			return nil, sqlStatus(err)
		}
		x.params[name] = val
	}
	return x, nil
}

func (d *dataServer) ExecuteQuery(req *btpb.ExecuteQueryRequest, stream btpb.Bigtable_ExecuteQueryServer) error {
	inst, err := parseInstance(req.GetInstanceName())
	if err != nil {
		return toStatus(err)
	}
	if handled, err := routeStream(d, stream.Context(), inst, req.GetAppProfileId(), nil,
		func(ctx context.Context, c btpb.BigtableClient) (recver[btpb.ExecuteQueryResponse], error) {
			return c.ExecuteQuery(ctx, req)
		}, stream.Send); handled {
		return err
	}
	x, err := d.setupExecute(req)
	if err != nil {
		return err
	}
	// Each kind of plan has its kind of token (see the top of the file).
	resumable := x.plan.Resumable()
	positioned := !resumable && x.plan.Positioned()
	var skip uint64
	var after []byte
	var from *sqlquery.Position
	var prefix uint64
	if tok := req.GetResumeToken(); len(tok) > 0 {
		var err error
		switch {
		case len(tok) >= 12 && string(tok[:4]) == resumeKeyMagic && resumable:
			skip, after = binary.BigEndian.Uint64(tok[4:12]), bytes.Clone(tok[12:])
		case len(tok) > 4 && string(tok[:4]) == resumePosMagic && positioned:
			from, err = sqlquery.DecodePosition(tok[4:])
		case len(tok) == 20 && string(tok[:4]) == resumeCountMagic && !resumable && !positioned:
			skip, prefix = binary.BigEndian.Uint64(tok[4:12]), binary.BigEndian.Uint64(tok[12:])
		default:
			err = errors.New("not made by this server for this query")
		}
		if err != nil {
			return status.Error(codes.InvalidArgument, "ebbtable: resume_token was not made by this server for this query")
		}
	}
	if x.md != nil {
		if err := stream.Send(&btpb.ExecuteQueryResponse{Response: &btpb.ExecuteQueryResponse_Metadata{Metadata: x.md}}); err != nil {
			return err
		}
	}
	w := &resultWriter{stream: stream, delivered: skip, keyed: after != nil, lastKey: after, hash: fnv.New64a(),
		size: d.s.knobs().sqlBatch.or(sqlBatchSize{batch: batchBytes, piece: pieceBytes})}
	now := d.s.opts.Clock.Now()
	switch {
	case after != nil:
		err = sqlErr(x.plan.RunAfter(stream.Context(), x.cat, x.params, now, after, func(key []byte, row []sqlquery.Value) error {
			w.lastKey = append(w.lastKey[:0], key...)
			return w.row(row)
		}))
	case resumable:
		var seen uint64
		err = sqlErr(x.plan.RunAfter(stream.Context(), x.cat, x.params, now, nil, func(key []byte, row []sqlquery.Value) error {
			seen++
			if seen <= skip {
				return nil
			}
			w.keyed = true
			w.lastKey = append(w.lastKey[:0], key...)
			return w.row(row)
		}))
	case positioned:
		if from != nil {
			w.delivered = from.Done
		}
		w.pos = from
		if w.pos == nil {
			w.pos = &sqlquery.Position{}
		}
		err = sqlErr(x.plan.RunFrom(stream.Context(), x.cat, x.params, now, from, func(at *sqlquery.Position, row []sqlquery.Value) error {
			w.pos = at
			return w.row(row)
		}))
	default:
		// No position: the retry runs the query again and skips the rows
		// got, which must be the rows got (their hash), else the result
		// changed and the retry is refused.
		w.counted = true
		var seen uint64
		var enc []byte
		err = d.runQuery(stream.Context(), x, func(row []sqlquery.Value) error {
			seen++
			if seen > skip {
				return w.row(row)
			}
			enc = enc[:0]
			for _, v := range row {
				enc = appendRowValue(enc, v)
			}
			w.hash.Write(enc)
			if seen == skip && w.hash.Sum64() != prefix {
				return resultChanged()
			}
			return nil
		})
		if err == nil && seen < skip {
			err = resultChanged()
		}
	}
	if err != nil {
		return err
	}
	return w.finish()
}

// runQuery runs a set-up query at the server's now, passing each row to
// fn; its error is the status ExecuteQuery answers. The web console's SQL
// page runs queries here too.
func (d *dataServer) runQuery(ctx context.Context, x *execSetup, fn func(row []sqlquery.Value) error) error {
	return sqlErr(x.plan.Run(ctx, x.cat, x.params, d.s.opts.Clock.Now(), fn))
}

// sqlErr is the status ExecuteQuery answers for a run's error.
func sqlErr(err error) error {
	if errors.Is(err, sqlquery.ErrStale) {
		return status.Error(codes.FailedPrecondition, err.Error()+"; run the query again")
	}
	if err != nil {
		if _, ok := status.FromError(err); ok && !errors.Is(err, sqlquery.ErrInvalid) {
			return err
		}
		return sqlStatus(err)
	}
	return nil
}

// resultChanged refuses a retry whose result no longer begins with the
// rows already got.
func resultChanged() error {
	return status.Error(codes.FailedPrecondition, "ebbtable: the query's result changed since the resume token was issued, and the query has no position to resume at (it reads a view or subquery that groups or orders, without ORDER BY); run it again")
}

// resultWriter batches result rows into checksummed ProtoRows batches.
type resultWriter struct {
	stream    btpb.Bigtable_ExecuteQueryServer
	n         int
	delivered uint64
	// keyed: tokens carry lastKey, the row key of the last row delivered.
	keyed   bool
	lastKey []byte
	// pos, when set, is the position tokens carry (a positioned plan).
	pos *sqlquery.Position
	// counted: tokens carry the count of rows delivered and hash, the
	// hash of their encodings.
	counted bool
	hash    hash.Hash64
	sent    bool
	// buf is the batch's ProtoRows, encoded as rows arrive.
	buf []byte
	// size is where a batch ends and how much of it one message
	// carries: batchBytes and pieceBytes (a test's knob may change them).
	size sqlBatchSize
}

func (w *resultWriter) row(vals []sqlquery.Value) error {
	start := len(w.buf)
	for _, v := range vals {
		w.buf = appendRowValue(w.buf, v)
	}
	if w.counted {
		w.hash.Write(w.buf[start:])
	}
	w.n++
	if len(w.buf) >= w.size.batch || w.n >= batchRows {
		return w.flush()
	}
	return nil
}

func (w *resultWriter) token() []byte {
	switch {
	case w.pos != nil:
		return append([]byte(resumePosMagic), w.pos.Encode()...)
	case w.keyed:
		tok := binary.BigEndian.AppendUint64([]byte(resumeKeyMagic), w.delivered)
		return append(tok, w.lastKey...)
	case w.counted:
		tok := binary.BigEndian.AppendUint64([]byte(resumeCountMagic), w.delivered)
		return binary.BigEndian.AppendUint64(tok, w.hash.Sum64())
	}
	// A resumable plan's stream before its first row.
	return binary.BigEndian.AppendUint64([]byte(resumeKeyMagic), 0)
}

func (w *resultWriter) flush() error {
	if w.n == 0 {
		return nil
	}
	sum := crc32.Checksum(w.buf, crc32c)
	w.delivered += uint64(w.n)
	data := w.buf
	for first := true; ; first = false {
		piece := data[:min(len(data), w.size.piece)]
		data = data[len(piece):]
		prs := &btpb.PartialResultSet{PartialRows: &btpb.PartialResultSet_ProtoRowsBatch{ProtoRowsBatch: &btpb.ProtoRowsBatch{BatchData: bytes.Clone(piece)}}}
		if first {
			prs.EstimatedBatchSize = int32(len(w.buf))
			// The stream's first message resets what a client kept of
			// an earlier attempt's unfinished batch.
			prs.Reset_ = !w.sent
		}
		if len(data) == 0 {
			prs.BatchChecksum = &sum
			prs.ResumeToken = w.token()
		}
		if err := w.stream.Send(&btpb.ExecuteQueryResponse{Response: &btpb.ExecuteQueryResponse_Results{Results: prs}}); err != nil {
			return err
		}
		if len(data) == 0 {
			break
		}
	}
	w.sent = true
	w.buf = w.buf[:0]
	w.n = 0
	return nil
}

// finish flushes the last batch; a stream that sent no batch still ends
// with a token, so the client knows the result (possibly empty) is whole.
func (w *resultWriter) finish() error {
	if err := w.flush(); err != nil {
		return err
	}
	if w.sent {
		return nil
	}
	return w.stream.Send(&btpb.ExecuteQueryResponse{Response: &btpb.ExecuteQueryResponse_Results{Results: &btpb.PartialResultSet{ResumeToken: w.token(), Reset_: true}}})
}
