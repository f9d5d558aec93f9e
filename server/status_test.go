package server

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ebbtable/ebbtable/clusteretcd"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestCodeOf checks the status code each engine and cluster sentinel
// becomes, wrapped as the engine and the cluster code wrap them.
func TestCodeOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		want codes.Code
	}{
		{nil, codes.OK},
		{fmt.Errorf("read t: %w", table.ErrTableNotFound), codes.NotFound},
		{fmt.Errorf("put: %w", clusteretcd.ErrClosed), codes.Unavailable},
		{fmt.Errorf("%w: %w", clusteretcd.ErrClosed, errors.New("etcdserver: request timed out")), codes.Unavailable},
		{fmt.Errorf("wait: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{status.Error(codes.Aborted, "x"), codes.Aborted},
		{errors.New("something else"), codes.Internal},
	} {
		if got := codeOf(c.err); got != c.want {
			t.Errorf("codeOf(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
