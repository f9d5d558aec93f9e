package server

import (
	"context"
	"sync/atomic"
	"time"

	tablets "github.com/ebbtable/ebbtable/cluster"
	"google.golang.org/grpc/mem"
)

// testKnobs are the hooks and bounds a test changes on its servers
// (Options.knobs). A test gives one to every server of its cluster, so a
// hook sees every node's calls (it is told which node calls), and may set
// or clear one while the servers run: each knob is atomic. Production
// servers have none; every knob then keeps its default, written where it
// is read. Before they were per server these were package variables, and
// the tests that set them could not run in parallel.
type testKnobs struct {
	// restoreRows runs on an owner before it ingests its part of a
	// restore; an error fails the part (clusterrestore.go).
	restoreRows knob[func(node string, start, end []byte) error]
	// restoreCommitting runs on a coordinator once its restore is
	// decided (committing), before the commit entry (clusterrestore.go).
	restoreCommitting knob[func(node string)]
	// backupRows runs before a coordinator asks for a backup's piece
	// (clusterbackup.go).
	backupRows knob[func(piece tablets.Tablet)]
	// backupOwner runs on an owner before it writes its part of a backup;
	// an error fails the part (clusterbackup.go).
	backupOwner knob[func(ctx context.Context, node string) error]
	// releaseKeptRead runs in releaseDead once it read a kept directory
	// of a table of the dead node (clusterfailrelease.go).
	releaseKeptRead knob[func(dead, table string)]
	// skipReleasePrevious leaves a previous engine's references
	// unreleased at a fresh start, as a version before the release at
	// fresh starts did (clusterfresh.go).
	skipReleasePrevious knob[bool]
	// minKeepDeleted replaces keepDeletedFor's floor (clusterschema.go).
	minKeepDeleted knob[time.Duration]
	// backupRetryEvery replaces the longest a backup waits between two
	// asks for a piece (clusterbackup.go).
	backupRetryEvery knob[time.Duration]
	// backupTotalsTTL replaces how long a reporting node reuses the
	// backup totals it read (clusterbackupmetrics.go).
	backupTotalsTTL knob[time.Duration]
	// pullMaxBytes replaces the record bytes one pull answer carries at
	// most; read when the server is built (replpeer.go).
	pullMaxBytes knob[int]
	// sqlBatch replaces batchBytes and pieceBytes, the bytes of rows
	// after which an ExecuteQuery result batch ends and the most one
	// message carries of it (sql.go): a test's rows need not be hundreds
	// of KiB each to stream in several batches of several pieces.
	sqlBatch knob[sqlBatchSize]
	// takersWait runs when a CreateTable finds no live node to place
	// tablets on and starts waiting for one (clusteradmin.go).
	takersWait knob[func(node string)]
	// bufferPool replaces the gRPC server's buffer pool (dirtyPool); read
	// when the server is built (server.go).
	bufferPool knob[mem.BufferPool]
}

// sqlBatchSize is the sqlBatch knob's value.
type sqlBatchSize struct{ batch, piece int }

// noKnobs is what a server without test knobs reads: all unset.
var noKnobs testKnobs

// knobs is the server's test knobs; all unset in production.
func (s *Server) knobs() *testKnobs {
	if k := s.opts.knobs; k != nil {
		return k
	}
	return &noKnobs
}

// knob is one test knob: unset, or a value a test set.
type knob[T any] struct{ p atomic.Pointer[T] }

// set sets the knob (tests).
func (k *knob[T]) set(v T) { k.p.Store(&v) }

// unset returns the knob to its default (tests).
func (k *knob[T]) unset() { k.p.Store(nil) }

// or is the knob's value, def when unset.
func (k *knob[T]) or(def T) T {
	if p := k.p.Load(); p != nil {
		return *p
	}
	return def
}

// get is the knob's value, T's zero value when unset (a nil hook).
func (k *knob[T]) get() T {
	var zero T
	return k.or(zero)
}
