package backup

import (
	"encoding/binary"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/rowttl"
	"github.com/ebbtable/ebbtable/table"
)

// TestRestoreRetentionModes: a restored table loses its row deletion policy
// by default (so restored expired rows are not purged at once), keeps it
// paused with pause (resumed by one call), or keeps it running with apply.
func TestRestoreRetentionModes(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	f := open(t, t.TempDir(), clk)
	f.eng.SetRowExpiry(rowttl.RowExpired)
	createTable(t, f.eng, "events")
	day := 24 * time.Hour
	for row, age := range map[string]time.Duration{"old": 40 * day, "new": day} {
		v := binary.BigEndian.AppendUint64(nil, uint64(clk.Now().Add(-age).UnixMicro()))
		set(t, f.eng, "events", row, "a", "created_at", 1000, string(v))
	}
	if _, err := f.eng.SetRowPolicy(inst, "events", table.PolicyAdd, table.RowPolicy{Family: "a", Qualifier: []byte("created_at"), Days: 30}); err != nil {
		t.Fatal(err)
	}
	if got := rows(t, f.eng, "events"); got != "new" {
		t.Fatalf("source table shows %q", got)
	}
	mustCreate(t, f.mgr, bname("b1"), "events", clk.Now().Add(7*day))

	cases := []struct {
		mode   table.Retention
		policy string // "", "paused" or "active"
		rows   string
	}{
		{table.RetentionDrop, "", "new old"},
		{table.RetentionPause, "paused", "new old"},
		{table.RetentionApply, "active", "new"},
	}
	for _, c := range cases {
		name := "r-" + string(c.mode)
		m := mustRestore(t, f.mgr, bname("b1"), name, c.mode)
		got := ""
		if m.RowPolicy != nil {
			got = "active"
			if m.RowPolicy.Paused {
				got = "paused"
			}
		}
		if got != c.policy || m.Restored == nil || m.Restored.Retention != c.mode {
			t.Fatalf("%s: policy %q, restored %+v", c.mode, got, m.Restored)
		}
		if r := rows(t, f.eng, name); r != c.rows {
			t.Fatalf("%s: rows %q, want %q", c.mode, r, c.rows)
		}
	}
	// Resuming the paused policy hides the expired row at once.
	if _, err := f.eng.ResumeRowPolicy(inst, "r-pause"); err != nil {
		t.Fatal(err)
	}
	if r := rows(t, f.eng, "r-pause"); r != "new" {
		t.Fatalf("after resume: %q", r)
	}
	if _, err := f.eng.ResumeRowPolicy(inst, "r-pause"); err == nil {
		t.Fatal("resuming a running policy succeeded")
	}
}

func rows(t *testing.T, e *table.Engine, tbl string) string {
	t.Helper()
	var keys []string
	for k := range readAll(t, e, tbl) {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, " ")
}
