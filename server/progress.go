package server

import (
	"context"
	"sync"

	"github.com/ebbtable/ebbtable/progress"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// MetaProgressID is the request metadata by which a client names a long
// call (GcRun, TtlRun, ReplicationDiff, CreateBackup, RestoreTable) so it
// can poll its progress with MethodProgress while the call runs. The id is
// the client's choice: 1 to 128 characters.
const MetaProgressID = "x-ebbtable-progress-id"

// MethodProgress: {id} → {found (bool), phase, unit, done, total (-1:
// unknown), finished (bool)}. The server remembers the last
// progress.DefaultRegistrySize operations.
const MethodProgress = "/" + EbbAdminService + "/Progress"

func init() {
	ebbAdminDesc.Methods = append(ebbAdminDesc.Methods, unaryStruct("Progress", (*ebbAdmin).progress))
}

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

func (a *ebbAdmin) progress(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	id := str(in, "id")
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: progress needs an id")
	}
	snap, ok := a.s.progressRegistry().Get(id)
	if !ok {
		return structpb.NewStruct(map[string]any{"found": false})
	}
	return structpb.NewStruct(map[string]any{
		"found": true, "phase": snap.Phase, "unit": snap.Unit,
		"done": snap.Done, "total": snap.Total, "finished": snap.Finished,
	})
}
