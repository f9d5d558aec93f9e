package rowttl

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/internal/testkit/enginetest"
	"github.com/ebbtable/ebbtable/table"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const inst = "projects/p/instances/i"

var day = 24 * time.Hour

type env struct {
	eng   *table.Engine
	job   *Job
	clock *clock.Fake
	reg   *prometheus.Registry
}

func newEnv(t testing.TB, vis table.Visibility, opts Options) *env {
	t.Helper()
	eng, fake := enginetest.Open(t, table.Options{Visibility: vis})
	eng.SetRowExpiry(RowExpired)
	reg := prometheus.NewRegistry()
	opts.Clock, opts.Registerer = fake, reg
	if opts.Pause == 0 {
		opts.Pause, opts.Duty = -1, 1
	}
	job, err := New(eng, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(job.Stop)
	if _, err := eng.CreateTable(inst, "events", table.TableSpec{Families: []table.FamilySpec{{Name: "meta"}, {Name: "d"}}}); err != nil {
		t.Fatal(err)
	}
	return &env{eng: eng, job: job, clock: fake, reg: reg}
}

func micros(t time.Time) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(t.UnixMicro()))
	return b[:]
}

// put writes a row with a data cell and, unless ts is nil, a created_at.
func (e *env) put(t testing.TB, row string, ts []byte) {
	t.Helper()
	muts := []table.Mutation{{Kind: table.SetCell, Family: "d", Qualifier: []byte("v"), Timestamp: table.ServerTimestamp, Value: []byte("x")}}
	if ts != nil {
		muts = append(muts, table.Mutation{Kind: table.SetCell, Family: "meta", Qualifier: []byte("created_at"), Timestamp: table.ServerTimestamp, Value: ts})
	}
	if err := e.eng.MutateRow(inst, "events", []byte(row), muts); err != nil {
		t.Fatal(err)
	}
}

func (e *env) ddl(t testing.TB, stmt string) {
	t.Helper()
	if _, err := Exec(e.eng, inst, stmt); err != nil {
		t.Fatal(err)
	}
}

// rows reads the row keys a reader sees (or, raw, every stored row).
func (e *env) rows(t testing.TB, raw bool) string {
	t.Helper()
	var keys []string
	err := e.eng.ReadRows(context.Background(), inst, "events", table.ReadRequest{IgnoreRowPolicy: raw}, func(r cell.Row) error {
		keys = append(keys, string(r.Key))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(keys, " ")
}

func TestJobDeletesExpiredRows(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{BatchRows: 2})
	now := e.clock.Now()
	e.put(t, "a-old", micros(now.Add(-40*day)))
	e.put(t, "b-new", micros(now.Add(-10*day)))
	e.put(t, "c-null", nil)
	e.put(t, "d-text-old", []byte(now.Add(-31*day).Format(time.RFC3339)))
	e.put(t, "e-bad", []byte("yesterday"))
	e.put(t, "f-future-old", micros(now.Add(-35*day)))
	e.put(t, "g-old", micros(now.Add(-100*day)))

	pr, err := e.job.Plan(context.Background(), inst, "events", mustPolicy(t, "OLDER_THAN(`meta:created_at`, INTERVAL 30 DAY)"))
	if err != nil {
		t.Fatal(err)
	}
	if pr.Rows != 4 || pr.Null != 1 || pr.Undeletable != 1 || pr.Scanned != 7 {
		t.Fatalf("plan = %+v; want 4 rows, 1 null, 1 undeletable of 7", pr)
	}
	if got := e.rows(t, false); got != "a-old b-new c-null d-text-old e-bad f-future-old g-old" {
		t.Fatalf("before any policy readers see %q", got)
	}
	e.ddl(t, "ALTER TABLE events ADD ROW DELETION POLICY (OLDER_THAN(`meta:created_at`, INTERVAL 30 DAY))")

	// Hidden at once in the default mode, still stored until the job runs.
	if got := e.rows(t, false); got != "b-new c-null e-bad" {
		t.Fatalf("readers see %q", got)
	}
	if got := e.rows(t, true); got != "a-old b-new c-null d-text-old e-bad f-future-old g-old" {
		t.Fatalf("stored %q", got)
	}
	var audited []Deletion
	e.job.opts.Auditor = AuditFunc(func(d Deletion) error { audited = append(audited, d); return nil })
	st, err := e.job.Run(context.Background(), Selector{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Deleted != 4 || st.Undeletable != 1 || st.Batches != 2 {
		t.Fatalf("run = %+v; want 4 deleted in 2 batches of 2, 1 undeletable", st)
	}
	if got := e.rows(t, true); got != "b-new c-null e-bad" {
		t.Fatalf("stored after the run: %q", got)
	}
	for _, d := range audited {
		if d.TransactionTag != "RowDeletionPolicy" || !d.IsSystemTransaction || d.CommitMicros == 0 || len(d.Rows) != 2 {
			t.Fatalf("audit record %+v", d)
		}
	}
	if got := testutil.ToFloat64(e.job.m.deleted.WithLabelValues(inst, "events")); got != 4 {
		t.Errorf("deleted_rows_total = %v", got)
	}
	if got := testutil.ToFloat64(e.job.m.undeletable.WithLabelValues(inst, "events")); got != 1 {
		t.Errorf("undeletable_rows = %v", got)
	}

	// Time passes: b-new expires; the watermark age grows until the next run.
	e.clock.Advance(25 * day)
	if n, err := testutil.GatherAndCount(e.reg, "ebbtable_ttl_processed_watermark_age_seconds"); err != nil || n != 1 {
		t.Fatalf("watermark series: %d, %v", n, err)
	}
	if got := e.rows(t, false); got != "c-null e-bad" {
		t.Fatalf("readers see %q after 25 days", got)
	}
	ss := e.job.Status(inst)
	if len(ss) != 1 || ss[0].Expression != "OLDER_THAN(`meta:created_at`, INTERVAL 30 DAY)" || ss[0].Undeletable != 1 || !ss[0].Watermark.Equal(now) {
		t.Fatalf("status %+v", ss)
	}
	if _, err := e.job.Run(context.Background(), Selector{Table: "events"}); err != nil {
		t.Fatal(err)
	}
	if got := e.rows(t, true); got != "c-null e-bad" {
		t.Fatalf("stored after the second run: %q", got)
	}
}

func mustPolicy(t testing.TB, s string) Policy {
	t.Helper()
	p, err := ParsePolicy(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestUntilCollectedShowsExpiredRows(t *testing.T) {
	e := newEnv(t, table.UntilCollected, Options{})
	e.put(t, "old", micros(e.clock.Now().Add(-2*day)))
	e.ddl(t, `ALTER TABLE events ADD TTL INTERVAL '1 day' ON "meta:created_at"`)
	if got := e.rows(t, false); got != "old" {
		t.Fatalf("until-collected readers see %q", got)
	}
	if _, err := e.job.Run(context.Background(), Selector{}); err != nil {
		t.Fatal(err)
	}
	if got := e.rows(t, false); got != "" {
		t.Fatalf("after the run readers see %q", got)
	}
}

func TestInterleavedChildrenGoWithParent(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{})
	old := micros(e.clock.Now().Add(-time.Hour))
	e.put(t, "customer#1", old)
	e.put(t, "customer#1#order#1", nil)
	e.put(t, "customer#1#order#2", micros(e.clock.Now().Add(time.Hour)))
	e.put(t, "customer#10", nil) // not a child: "customer#1" + "#" is not its prefix
	e.put(t, "customer#2", micros(e.clock.Now().Add(time.Hour)))
	e.put(t, "customer#2#order#1", old)
	e.ddl(t, `ALTER TABLE events SET INTERLEAVE SEPARATOR '#order#'`)
	e.ddl(t, "ALTER TABLE events ADD ROW DELETION POLICY (OLDER_THAN(`meta:created_at`, INTERVAL 0 DAY))")
	// Readers no longer see the expired rows, nor the children of one.
	if got := e.rows(t, false); got != "customer#10 customer#2" {
		t.Fatalf("readers see %q", got)
	}
	pr, err := e.job.Plan(context.Background(), inst, "events", mustPolicy(t, "OLDER_THAN(`meta:created_at`, INTERVAL 0 DAY)"))
	if err != nil || pr.Rows != 2 || pr.Children != 2 {
		t.Fatalf("plan %+v, %v; want 2 rows and 2 children", pr, err)
	}
	var batches []Deletion
	e.job.opts.Auditor = AuditFunc(func(d Deletion) error { batches = append(batches, d); return nil })
	st, err := e.job.Run(context.Background(), Selector{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Deleted != 4 || st.Children != 2 || st.Batches != 1 {
		t.Fatalf("run %+v", st)
	}
	if got := e.rows(t, true); got != "customer#10 customer#2" {
		t.Fatalf("stored %q", got)
	}
	var keys []string
	for _, r := range batches[0].Rows {
		keys = append(keys, fmt.Sprintf("%s<%s", r.Key, r.Parent))
	}
	if got := strings.Join(keys, " "); got != "customer#1< customer#1#order#1<customer#1 customer#1#order#2<customer#1 customer#2#order#1<" {
		t.Fatalf("one batch recorded %s", got)
	}
}

func TestFailedBatchRetriedSmaller(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{BatchRows: 8})
	now := e.clock.Now()
	for i := range 8 {
		e.put(t, fmt.Sprintf("r%d", i), micros(now.Add(-time.Duration(i+1)*time.Hour)))
	}
	e.ddl(t, `ALTER TABLE events ADD TTL INTERVAL '0 days' ON "meta:created_at"`)
	// Batches of more than 3 rows fail, and so does any batch holding r5.
	e.job.opts.Auditor = AuditFunc(func(d Deletion) error {
		for _, r := range d.Rows {
			if string(r.Key) == "r5" {
				return errors.New("injected: r5")
			}
		}
		if len(d.Rows) > 3 {
			return errors.New("injected: too big")
		}
		return nil
	})
	st, err := e.job.Run(context.Background(), Selector{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Deleted != 7 || st.Undeletable != 1 {
		t.Fatalf("run %+v; want 7 deleted, 1 undeletable", st)
	}
	ss := e.job.Status(inst)
	if want := now.Add(-6 * time.Hour); !ss[0].SmallestUndeletable.Equal(want) {
		t.Fatalf("smallest undeletable %v, want %v", ss[0].SmallestUndeletable, want)
	}
	if got := e.rows(t, true); got != "r5" {
		t.Fatalf("stored %q", got)
	}
	e.job.opts.Auditor = NoAudit{}
	if st, err := e.job.Run(context.Background(), Selector{}); err != nil || st.Deleted != 1 || st.Undeletable != 0 {
		t.Fatalf("the next run: %+v, %v", st, err)
	}
}

func TestBackgroundRunsOnSchedule(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{Interval: time.Hour})
	e.ddl(t, `ALTER TABLE events ADD TTL INTERVAL '0 days' ON "meta:created_at"`)
	e.job.Start()
	// Inserted already expired: accepted, deleted by the next run.
	e.put(t, "late", micros(e.clock.Now().Add(-48*time.Hour)))
	if got := e.rows(t, true); got != "late" {
		t.Fatalf("stored %q", got)
	}
	for e.clock.Waiters() == 0 {
		time.Sleep(time.Millisecond)
	}
	e.clock.Advance(time.Hour)
	deadline := time.Now().Add(10 * time.Second)
	for e.rows(t, true) != "" {
		if time.Now().After(deadline) {
			t.Fatal("the scheduled run did not delete the row")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPolicyDDLRules(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{})
	for _, tc := range []struct {
		stmt string
		err  error
	}{
		{"ALTER TABLE events REPLACE ROW DELETION POLICY (OLDER_THAN(`meta:c`, INTERVAL 1 DAY))", table.ErrPrecondition},
		{"ALTER TABLE events DROP TTL", table.ErrPrecondition},
		{"ALTER TABLE events ADD ROW DELETION POLICY (OLDER_THAN(`nope:c`, INTERVAL 1 DAY))", table.ErrFamilyNotFound},
		{"ALTER TABLE nope ADD ROW DELETION POLICY (OLDER_THAN(`meta:c`, INTERVAL 1 DAY))", table.ErrTableNotFound},
		{"ALTER TABLE events ADD ROW DELETION POLICY (OLDER_THAN(`meta:c`, INTERVAL 1 DAY))", nil},
		{`ALTER TABLE events ADD TTL INTERVAL '2 days' ON "meta:c"`, table.ErrPrecondition},
		{`ALTER TABLE events ALTER TTL INTERVAL '2 days' ON "meta:c"`, nil},
		{"ALTER TABLE events DROP ROW DELETION POLICY", nil},
		{"CREATE TABLE t2 (`k:id` STRING(MAX), `m:ts` TIMESTAMP) PRIMARY KEY (`k:id`), ROW DELETION POLICY (OLDER_THAN(`m:ts`, INTERVAL 3 DAY))", nil},
		{"CREATE TABLE t2 (`k:id` STRING(MAX)) PRIMARY KEY (`k:id`)", table.ErrTableExists},
	} {
		_, err := Exec(e.eng, inst, tc.stmt)
		if (tc.err == nil) != (err == nil) || (tc.err != nil && !errors.Is(err, tc.err)) {
			t.Errorf("%s: error %v, want %v", tc.stmt, err, tc.err)
		}
	}
	if _, err := e.eng.ModifyFamilies(inst, "t2", []table.FamilyMod{{Name: "m", Drop: true}}); !errors.Is(err, table.ErrPrecondition) {
		t.Errorf("dropping the policy's family: %v", err)
	}
	m, _ := e.eng.Table(inst, "t2")
	if m.RowPolicy == nil || FromTable(*m.RowPolicy).Expression() != "OLDER_THAN(`m:ts`, INTERVAL 3 DAY)" {
		t.Fatalf("t2 policy %+v", m.RowPolicy)
	}
}

func TestPolicyIsDurable(t *testing.T) {
	dir := t.TempDir()
	eng, err := table.Open(table.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.CreateTable(inst, "events", table.TableSpec{Families: []table.FamilySpec{{Name: "meta"}}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`ALTER TABLE events ADD TTL INTERVAL '30 days' ON "meta:created_at"`, `ALTER TABLE events SET INTERLEAVE SEPARATOR '#'`} {
		if _, err := Exec(eng, inst, s); err != nil {
			t.Fatal(err)
		}
	}
	eng.Close()
	eng, err = table.Open(table.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	m, err := eng.Table(inst, "events")
	if err != nil {
		t.Fatal(err)
	}
	if m.RowPolicy == nil || FromTable(*m.RowPolicy).Expression() != "OLDER_THAN(`meta:created_at`, INTERVAL 30 DAY)" || string(m.InterleaveSeparator) != "#" {
		t.Fatalf("after reopening: policy %+v, separator %q", m.RowPolicy, m.InterleaveSeparator)
	}
}

// TestDeletionsAuditedInChangeStream: every row the job deletes is recorded
// in the table's change stream, in the same batch, as a system transaction
// tagged RowDeletionPolicy; user writes stay USER records.
func TestDeletionsAuditedInChangeStream(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{})
	if _, err := e.eng.SetChangeStream(inst, "events", 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	now := e.clock.Now()
	e.put(t, "old", micros(now.Add(-40*day)))
	e.put(t, "new", micros(now.Add(-1*day)))
	e.ddl(t, "ALTER TABLE events ADD ROW DELETION POLICY (OLDER_THAN(`meta:created_at`, INTERVAL 30 DAY))")
	e.clock.Advance(time.Second)
	if _, err := e.job.Run(context.Background(), Selector{}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	m, err := e.eng.Table(inst, "events")
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.eng.ReadChanges(m, changestream.TimeKey(m.ID, 0), 0)
	if err != nil {
		t.Fatal(err)
	}
	var user, system []string
	for _, r := range got.Records {
		if r.IsSystem {
			if r.TransactionTag != "RowDeletionPolicy" || r.Reason != changestream.ReasonRowDeletionPolicy || len(r.Mods) != 1 || r.Mods[0].Kind != changestream.DeleteFromRow {
				t.Fatalf("system record %+v", r)
			}
			system = append(system, string(r.RowKey))
			continue
		}
		user = append(user, string(r.RowKey))
	}
	if strings.Join(system, " ") != "old" || strings.Join(user, " ") != "old new" {
		t.Fatalf("records: system %v, user %v", system, user)
	}
}
