package replication

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ebbtable/ebbtable/clock"
)

// The coordinated raise of a max age on a replicated table
// (docs/replication.md, "GC across clusters"). Plain raises replicate like
// any schema change and may leave clusters out of sync for the span between
// their age cutoffs. A coordinated raise avoids that: it holds the family's
// age sweeps on every cluster, has each collect the family under the old
// rule as of one common instant, changes the rule, waits until every
// cluster has it, then releases the holds — so every cluster's age cutoff
// for the family is the same.

// Holder holds one family's age sweeps on a cluster (the server's
// EbbAdmin/GcHold, to itself or to a peer).
type Holder interface {
	// Hold holds (hold true) or releases the family's age sweeps on
	// cluster; with collectAt it first collects the family as a pass at
	// that instant would. It answers the family's rule there, as
	// gcrule.Rule.String prints it.
	Hold(ctx context.Context, cluster string, hold bool, collectAt *time.Time) (rule string, err error)
}

// Raise is one coordinated raise.
type Raise struct {
	// Clusters are every cluster of the instance, this one first.
	Clusters []string
	Holder   Holder
	// Change sets the new rule here, without the pre-change sweep (the
	// collection already happened); replication carries it to the others.
	Change func() error
	// Rule is the new rule as the clusters report it.
	Rule string
	// Clock picks the common instant; Pace times the wait for the
	// clusters to have the rule (nil: Clock).
	Clock, Pace clock.Clock
	// Wait bounds that wait; Poll is how often each cluster is asked.
	Wait, Poll time.Duration
	Log        *slog.Logger
}

// RaiseError is a coordinated raise that could not finish: a cluster that
// could not be held or collected (Late false), or one that did not have the
// new rule in time (Late true: the rule is changed).
type RaiseError struct {
	Cluster string
	Late    bool
	msg     string
}

func (e *RaiseError) Error() string { return e.msg }

// Run performs the raise. The holds it took are released whatever happens.
// A context error comes back as is, Change's error as is, the rest as a
// *RaiseError.
func (r Raise) Run(ctx context.Context) error {
	pace := r.Pace
	if pace == nil {
		pace = r.Clock
	}
	var held []string
	defer func() {
		for _, id := range held {
			if _, err := r.Holder.Hold(context.Background(), id, false, nil); err != nil && r.Log != nil {
				r.Log.Warn("coordinated raise: cannot release the hold", "cluster", id, "err", err)
			}
		}
	}()
	// 1. Hold the family's age sweeps everywhere.
	for _, id := range r.Clusters {
		if _, err := r.Holder.Hold(ctx, id, true, nil); err != nil {
			return &RaiseError{Cluster: id, msg: fmt.Sprintf("coordinated raise: cluster %s cannot hold its age sweeps: %v", id, err)}
		}
		held = append(held, id)
	}
	// 2. Collect under the old rule as of one instant, everywhere.
	at := r.Clock.Now()
	for _, id := range r.Clusters {
		if _, err := r.Holder.Hold(ctx, id, true, &at); err != nil {
			return &RaiseError{Cluster: id, msg: fmt.Sprintf("coordinated raise: cluster %s cannot collect: %v", id, err)}
		}
	}
	// 3. Change the rule (the collection already happened: no sweep first).
	if err := r.Change(); err != nil {
		return err
	}
	// 4. Wait until every other cluster has the new rule.
	deadline := pace.Now().Add(r.Wait)
	for _, id := range r.Clusters[min(1, len(r.Clusters)):] {
		for {
			rule, err := r.Holder.Hold(ctx, id, true, nil)
			if err == nil && rule == r.Rule {
				break
			}
			if pace.Now().After(deadline) {
				return &RaiseError{Cluster: id, Late: true, msg: fmt.Sprintf("coordinated raise: cluster %s did not receive the new rule within %v (holds released; the rule is changed)", id, r.Wait)}
			}
			timer, stop := clock.Timer(pace, r.Poll)
			select {
			case <-ctx.Done():
				stop()
				return ctx.Err()
			case <-timer:
			}
		}
	}
	// 5. The deferred release lets the sweeps go on under the new rule.
	return nil
}
