package server

import (
	"context"
	"errors"

	"github.com/ebbtable/ebbtable/backup"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"github.com/ebbtable/ebbtable/filter"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// codeTable maps each engine sentinel to the status code Bigtable uses.
var codeTable = []struct {
	err  error
	code codes.Code
}{
	{table.ErrTableNotFound, codes.NotFound},
	{table.ErrFamilyNotFound, codes.NotFound},
	{table.ErrTableExists, codes.AlreadyExists},
	{table.ErrFamilyExists, codes.AlreadyExists},
	{table.ErrInvalid, codes.InvalidArgument},
	{filter.ErrInvalid, codes.InvalidArgument},
	{gcrule.ErrInvalid, codes.InvalidArgument},
	{table.ErrPrecondition, codes.FailedPrecondition},
	{table.ErrOutOfRange, codes.OutOfRange},
	{table.ErrClosed, codes.Unavailable},
	{table.ErrStorageFailed, codes.Unavailable},
	// A node leaving the cluster (closing, or abandoned after it lost its
	// lease) answers UNAVAILABLE: another node serves the call on a retry.
	{clusteretcd.ErrClosed, codes.Unavailable},
	{table.ErrDataLoss, codes.DataLoss},
	{backup.ErrNotFound, codes.NotFound},
	{backup.ErrExists, codes.AlreadyExists},
	{errNotFound, codes.NotFound},
	{errInvalid, codes.InvalidArgument},
	{context.Canceled, codes.Canceled},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
}

var (
	errNotFound = errors.New("ebbtable: not found")
	errInvalid  = errors.New("ebbtable: invalid argument")
)

// toStatus turns an engine error into a gRPC status error. Errors that are
// already statuses pass through; anything unknown is Internal.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codeOf(err), err.Error())
}

func codeOf(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	for _, row := range codeTable {
		if errors.Is(err, row.err) {
			return row.code
		}
	}
	return codes.Internal
}
