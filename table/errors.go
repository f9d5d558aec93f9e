package table

import "errors"

// Sentinel errors. Every error the engine returns wraps one of them, so the
// server maps it to a status code in one place.
var (
	ErrTableNotFound  = errors.New("ebbtable: table not found")
	ErrTableExists    = errors.New("ebbtable: table already exists")
	ErrFamilyNotFound = errors.New("ebbtable: column family not found")
	ErrFamilyExists   = errors.New("ebbtable: column family already exists")
	ErrInvalid        = errors.New("ebbtable: invalid argument")
	ErrPrecondition   = errors.New("ebbtable: failed precondition")
	ErrOutOfRange     = errors.New("ebbtable: out of range")
	ErrClosed         = errors.New("ebbtable: engine closed")
)
