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
	// ErrStorageFailed: the engine met a storage error it cannot continue
	// after (see Options.OnFatal) and serves nothing more.
	ErrStorageFailed = errors.New("ebbtable: storage failed; the server is stopping")
	// ErrDataLoss: stored data is corrupt (a checksum failed); the error
	// names the file.
	ErrDataLoss = errors.New("ebbtable: stored data is corrupt")
)
