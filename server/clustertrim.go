package server

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ebbtable/ebbtable/clusteretcd"
	"github.com/ebbtable/ebbtable/internal/durable"
	"github.com/ebbtable/ebbtable/table"
)

// Trimming the schema log (clusteretcd/schemalog.go). Once a node has
// applied SchemaTrimEvery entries past the last snapshot, it writes a
// snapshot of its schema (every table's metadata as the engine keeps it,
// the table's and its families' ids included, with the table's authorized
// views and extra settings) and etcd drops the entries every node has
// applied. A node with a new data directory installs the snapshot's
// tables and applies the entries after it; a node that was down keeps
// its progress mark, so the entries it needs stay until it returns (or
// until `node drain --force` gives it up).
//
// What a snapshot leaves out: deleted tables (an undelete finds nothing
// to undelete on a node that joined after the trim), IAM policies and
// schema bundles (not replicated by the log at all).

// DefaultSchemaTrimEvery is how many applied entries past the last
// snapshot make a node write the next one.
const DefaultSchemaTrimEvery = 1000

// schemaSnapshot is what a snapshot's data holds.
type schemaSnapshot struct {
	Tables []snapshotTable `json:"tables"`
	// Views are the instances' logical and materialized views
	// (clusterviews.go).
	Views []snapshotView `json:"views,omitempty"`
}

// snapshotView is a view's instance metadata.
type snapshotView struct {
	Kind     string `json:"kind"`
	Instance string `json:"instance"`
	Name     string `json:"name"`
	Value    []byte `json:"value"`
}

type snapshotTable struct {
	Meta *table.Meta `json:"meta"`
	// Instance metadata of the table: its authorized views and extra
	// settings (kind, name, value).
	Extra []snapshotMeta `json:"extra,omitempty"`
}

type snapshotMeta struct {
	Kind  string `json:"kind"`
	Name  string `json:"name"`
	Value []byte `json:"value"`
}

// snapshotKinds are the kinds of instance metadata that belong to a table.
var snapshotKinds = []string{kindAuthView, kindTableExt}

// buildSnapshot encodes this node's schema (call it between applies).
func (c *clusterMember) buildSnapshot() ([]byte, error) {
	var snap schemaSnapshot
	for _, m := range c.s.engine.Tables("") {
		st := snapshotTable{Meta: m}
		own := "tables/" + m.Name
		for _, kind := range snapshotKinds {
			err := c.s.engine.InstanceMeta(kind, m.Instance, func(_, name string, v []byte) error {
				if name == own || strings.HasPrefix(name, own+"/") {
					st.Extra = append(st.Extra, snapshotMeta{Kind: kind, Name: name, Value: append([]byte(nil), v...)})
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
		snap.Tables = append(snap.Tables, st)
	}
	for _, kind := range []string{kindLogicalView, kindMaterializedView} {
		err := c.s.engine.InstanceMeta(kind, "", func(inst, name string, v []byte) error {
			snap.Views = append(snap.Views, snapshotView{Kind: kind, Instance: inst, Name: name, Value: append([]byte(nil), v...)})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return json.Marshal(snap)
}

// installSnapshot gives a new node the snapshot's tables.
func (c *clusterMember) installSnapshot(data []byte) error {
	var snap schemaSnapshot
	if err := json.Unmarshal(data, &snap); err != nil {
		return fmt.Errorf("ebbtable: undecodable schema snapshot: %w", err)
	}
	for _, st := range snap.Tables {
		if _, err := c.s.engine.InstallTable(st.Meta); err != nil {
			return fmt.Errorf("ebbtable: install table %s from the schema snapshot: %w", st.Meta.Name, err)
		}
		for _, x := range st.Extra {
			if err := c.s.engine.PutInstanceMeta(x.Kind, st.Meta.Instance, x.Name, x.Value); err != nil {
				return err
			}
		}
	}
	for _, v := range snap.Views {
		if err := c.s.engine.PutInstanceMeta(v.Kind, v.Instance, v.Name, v.Value); err != nil {
			return err
		}
	}
	if len(snap.Views) > 0 {
		c.s.mviews.changed() // the maintained views are indexed again
	}
	return nil
}

// loadSnapshot runs as the node starts, before it catches up with the log:
// a new node installs the snapshot when the log lost entries it needs; a
// node with state that fell behind the trim is refused.
func (c *clusterMember) loadSnapshot(ctx context.Context) error {
	applied := c.appliedSeq()
	// From here on no trim takes the entries after applied.
	if err := c.m.PublishProgress(ctx, applied); err != nil {
		return err
	}
	snap, ok, err := c.m.ReadSnapshot(ctx)
	if err != nil || !ok || snap.Trimmed <= applied {
		return err
	}
	if applied > 0 || len(c.s.engine.Tables("")) > 0 {
		return fmt.Errorf("%w (node %s applied %d, the log keeps entries after %d): give it a new data directory", clusteretcd.ErrTrimmed, c.opts.NodeID, applied, snap.Trimmed)
	}
	if err := c.installSnapshot(snap.Data); err != nil {
		return err
	}
	if err := durable.ReplaceFile(filepath.Join(c.s.opts.DataDir, clusterAppliedFile), []byte(strconv.FormatUint(snap.Seq, 10))); err != nil {
		return err
	}
	c.applyMu.Lock()
	c.applied = snap.Seq
	c.applyMu.Unlock()
	c.s.log.Info("installed the schema snapshot", "seq", snap.Seq, "tables", strings.Count(string(snap.Data), `"meta"`))
	return c.m.PublishProgress(ctx, snap.Seq)
}

// maybeTrim writes a snapshot and trims the log once enough entries were
// applied since the last one (called by the apply loop, between applies).
func (c *clusterMember) maybeTrim(ctx context.Context) {
	every := c.opts.SchemaTrimEvery
	if every == 0 {
		every = DefaultSchemaTrimEvery
	}
	if every < 0 {
		return
	}
	c.applyRun.Lock()
	due := c.appliedSeq() >= c.snapSeq+uint64(every)
	c.applyRun.Unlock()
	if !due {
		return
	}
	if _, err := c.trimSchemaLog(ctx); err != nil {
		c.s.log.Warn("trim the schema log", "err", err)
	}
}

// trimSchemaLog writes a snapshot at this node's applied mark and trims
// what every node applied; it returns the entries trimmed (up to).
func (c *clusterMember) trimSchemaLog(ctx context.Context) (uint64, error) {
	c.applyRun.Lock()
	defer c.applyRun.Unlock()
	applied := c.appliedSeq()
	data, err := c.buildSnapshot()
	if err != nil {
		return 0, err
	}
	upto, err := c.m.Trim(ctx, applied, data)
	if err != nil {
		return 0, err
	}
	if upto > 0 {
		c.snapSeq = applied
		c.s.log.Info("schema log trimmed", "snapshot", applied, "trimmed", upto)
	}
	return upto, nil
}
