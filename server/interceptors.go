package server

import (
	"context"
	"log/slog"
	"runtime/debug"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The server's gRPC interceptors are one unary and one stream function
// rather than grpc.Chain*Interceptor of three each: a chain allocates a
// closure per link on every call. In order, a call is: a panic in it
// turned into an Internal error (so no request can crash the process),
// refused while this node joins (joinRefusal), then the security steps
// (security.serveUnary, security.serveStream).

// unaryInterceptor is the server's unary interceptor. The request was
// decoded, and counted in flight by the codec, before it runs: its bytes
// are taken over (admit) first, so that a call refused on the way still
// gives them back.
func (s *Server) unaryInterceptor() grpc.UnaryServerInterceptor {
	sec, log := s.sec, s.log
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				err = panicked(log, info.FullMethod, r)
			}
			if r, ok := req.(*btpb.MutateRowRequest); ok && err != nil {
				// The bytes the codec kept, if the call ended before its
				// handler took them (mutaterowswire.go). The handler
				// takes them first thing, so only a call that failed
				// (or panicked) may have left them: a served one skips
				// the stash's lock.
				sec.wire.take(r)
			}
		}()
		n, tooMuch := sec.admit(req)
		defer sec.inflight.Add(-n)
		if err := s.joinRefusal(info.FullMethod); err != nil {
			return nil, err
		}
		return sec.serveUnary(ctx, req, info, h, tooMuch)
	}
}

// streamInterceptor is the server's stream interceptor; a stream's
// requests are counted as the handler receives them (guardedStream).
func (s *Server) streamInterceptor() grpc.StreamServerInterceptor {
	sec, log := s.sec, s.log
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = panicked(log, info.FullMethod, r)
			}
		}()
		if err := s.joinRefusal(info.FullMethod); err != nil {
			return err
		}
		return sec.serveStream(srv, ss, info, h)
	}
}

// panicked logs a handler's panic and returns the call's error.
func panicked(log *slog.Logger, method string, r any) error {
	log.Error("panic in handler", "method", method, "panic", r, "stack", string(debug.Stack()))
	return status.Errorf(codes.Internal, "ebbtable: internal error in %s", method)
}
