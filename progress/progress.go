// Package progress tracks how far long operations (a GC pass, a TTL run, a
// backup, a restore, a replication diff) have come, so a client can poll
// them while they run. The code doing the work reports to the Op it finds
// in its context; the server keeps Ops in a bounded Registry by the id the
// client chose.
package progress

import (
	"context"
	"sync"
)

// Snapshot is an Op's state at one moment.
type Snapshot struct {
	// Phase says what the operation is doing now ("table events (1/3)").
	Phase string
	// Unit is what Done and Total count ("cells", "rows", "chunks").
	Unit string
	// Done is how many units the phase has handled; Total how many it
	// will (possibly an estimate, never below Done), or -1 when that is
	// not known in advance.
	Done, Total int64
	// Finished is set once the whole operation has ended.
	Finished bool
}

// Op is one operation's progress. A nil *Op ignores every report, so
// work that runs without a tracker needs no checks.
type Op struct {
	mu sync.Mutex
	s  Snapshot
}

// NewOp returns an Op with no phase yet.
func NewOp() *Op { return &Op{s: Snapshot{Total: -1}} }

// Phase starts a phase counting unit, of total units (-1: unknown).
func (o *Op) Phase(phase, unit string, total int64) {
	if o == nil {
		return
	}
	o.mu.Lock()
	o.s.Phase, o.s.Unit, o.s.Total, o.s.Done = phase, unit, total, 0
	o.mu.Unlock()
}

// Recount restarts the current phase's count in another unit, of total
// units (-1: unknown): a phase that learns what it will do once it has
// planned (a GC pass visiting rows instead of sweeping cells).
func (o *Op) Recount(unit string, total int64) {
	if o == nil {
		return
	}
	o.mu.Lock()
	o.s.Unit, o.s.Total, o.s.Done = unit, total, 0
	o.mu.Unlock()
}

// Add counts n more units done in the current phase. A total that was an
// estimate and proves short grows with Done.
func (o *Op) Add(n int64) {
	if o == nil {
		return
	}
	o.mu.Lock()
	o.s.Done += n
	if o.s.Total >= 0 && o.s.Done > o.s.Total {
		o.s.Total = o.s.Done
	}
	o.mu.Unlock()
}

// Finish marks the operation ended.
func (o *Op) Finish() {
	if o == nil {
		return
	}
	o.mu.Lock()
	o.s.Finished = true
	o.mu.Unlock()
}

// Snapshot returns the Op's state now.
func (o *Op) Snapshot() Snapshot {
	if o == nil {
		return Snapshot{Total: -1}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.s
}

type ctxKey struct{}

// NewContext returns ctx carrying op.
func NewContext(ctx context.Context, op *Op) context.Context {
	return context.WithValue(ctx, ctxKey{}, op)
}

// FromContext returns the Op ctx carries, or nil.
func FromContext(ctx context.Context) *Op {
	op, _ := ctx.Value(ctxKey{}).(*Op)
	return op
}

// Registry holds the most recent Ops by id, at most max of them: the
// oldest is forgotten first, so a client that never polls costs nothing
// lasting.
type Registry struct {
	mu    sync.Mutex
	max   int
	ops   map[string]*Op
	order []string // ids, oldest first
}

// DefaultRegistrySize is how many operations a server remembers.
const DefaultRegistrySize = 256

// NewRegistry returns a Registry that remembers up to max Ops.
func NewRegistry(max int) *Registry {
	if max < 1 {
		max = 1
	}
	return &Registry{max: max, ops: map[string]*Op{}}
}

// Attach registers op under id, replacing any Op of that id.
func (r *Registry) Attach(id string, op *Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.ops[id]; ok {
		for i, o := range r.order {
			if o == id {
				r.order = append(r.order[:i], r.order[i+1:]...)
				break
			}
		}
	}
	r.ops[id] = op
	r.order = append(r.order, id)
	for len(r.order) > r.max {
		delete(r.ops, r.order[0])
		r.order = r.order[1:]
	}
}

// Get returns the state of the Op registered under id.
func (r *Registry) Get(id string) (Snapshot, bool) {
	r.mu.Lock()
	op, ok := r.ops[id]
	r.mu.Unlock()
	if !ok {
		return Snapshot{}, false
	}
	return op.Snapshot(), true
}
