package server

import (
	"context"
	"sync"

	"github.com/ebbtable/ebbtable/progress"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// MetaProgressID is the request metadata by which a client names a long
// call (GcRun, TtlRun, ReplicationDiff, CreateBackup, RestoreTable) so it
// can poll its progress with MethodProgress while the call runs. The id is
// the client's choice: 1 to 128 characters.
const MetaProgressID = "x-ebbtable-progress-id"

// MethodProgress reports a named call's progress. The server remembers the
// last progress.DefaultRegistrySize operations.
const MethodProgress = ebbadminpb.EbbAdmin_Progress_FullMethodName

// lazyProgress is a Server's progress registry, made on first use.
type lazyProgress struct {
	once sync.Once
	reg  *progress.Registry
}

func (s *Server) progressRegistry() *progress.Registry {
	s.progress.once.Do(func() { s.progress.reg = progress.NewRegistry(progress.DefaultRegistrySize) })
	return s.progress.reg
}

// progressID returns the id a request's metadata names, if any.
func progressID(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(MetaProgressID)
	if len(v) == 0 || len(v[0]) == 0 || len(v[0]) > 128 {
		return ""
	}
	return v[0]
}

// trackProgress registers a new Op under the request's progress id and
// returns ctx carrying it, for work done within the call. Without an id
// the Op is nil and reports go nowhere. Call Finish on it when done.
func (s *Server) trackProgress(ctx context.Context) (context.Context, *progress.Op) {
	id := progressID(ctx)
	if id == "" {
		return ctx, nil
	}
	op := progress.NewOp()
	s.progressRegistry().Attach(id, op)
	return progress.NewContext(ctx, op), op
}

// attachProgress registers op (a background job's) under the request's
// progress id, if it has one.
func (s *Server) attachProgress(ctx context.Context, op *progress.Op) {
	if id := progressID(ctx); id != "" && op != nil {
		s.progressRegistry().Attach(id, op)
	}
}

func (a *ebbAdmin) Progress(ctx context.Context, in *ebbadminpb.ProgressRequest) (*ebbadminpb.ProgressResponse, error) {
	id := in.GetId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: progress needs an id")
	}
	snap, ok := a.s.progressRegistry().Get(id)
	if !ok {
		return &ebbadminpb.ProgressResponse{Found: false}, nil
	}
	return &ebbadminpb.ProgressResponse{
		Found: true, Phase: snap.Phase, Unit: snap.Unit,
		Done: int64(snap.Done), Total: int64(snap.Total), Finished: snap.Finished,
	}, nil
}
