package collector

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
)

var (
	incSeeds = flag.Int("inc.seeds", 3, "TestIncrementalMatchesWholeSweep: random histories")
	incOps   = flag.Int("inc.ops", 300, "TestIncrementalMatchesWholeSweep: operations per history")
)

// incRules are the rules a random history gives its families.
var incRules = []string{"never", "maxversions=2", "maxage=1h", "maxage=30m && maxversions=1",
	"maxage=2h || maxversions=3", "maxversions=1", "(maxage=20m && maxversions=2) || maxage=3h"}

// rawDump lists a table's stored cells (key and value), changing nothing.
func rawDump(t *testing.T, e *env, tbl string) []string {
	t.Helper()
	m, err := e.eng.Table(inst, tbl)
	if err != nil {
		t.Fatal(err)
	}
	it, err := e.eng.RawIter(storage.TablePrefix(m.ID), storage.TableEnd(m.ID))
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out []string
	for it.First(); it.Valid(); it.Next() {
		d, err := storage.DecodeCellKey(it.Key())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s/%d:%s@%d exp=%d", d.Row, d.FamilyID, d.Qualifier, d.Timestamp, storage.ValueExpiry(rawValue(t, it))))
	}
	return out
}

// TestIncrementalMatchesWholeSweep runs two engines through the same random
// history — writes at server, past and future times, native expiries,
// deletes, rule changes, new and dropped families, flushes and time passing
// — one collected by incremental passes, the other swept whole every pass,
// and checks after every pass that both store exactly the same cells.
func TestIncrementalMatchesWholeSweep(t *testing.T) {
	t.Parallel()
	for seed := 0; seed < *incSeeds; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			inc := newEnv(t, table.HideEligible, Options{Pause: -1, WholeShare: -1})
			whole := newEnv(t, table.HideEligible, Options{Pause: -1, AlwaysWhole: true})
			envs := []*env{inc, whole}
			r := rand.New(rand.NewPCG(uint64(seed), 16))
			fams := map[string]string{"a": "maxversions=2", "b": "maxage=1h", "c": "maxage=30m && maxversions=1", "d": "never"}
			for _, e := range envs {
				e.create(t, "t", fams)
			}
			names := []string{"a", "b", "c", "d"}
			nextFam := 0
			both := func(fn func(e *env) error) {
				t.Helper()
				var errs [2]error
				for i, e := range envs {
					errs[i] = fn(e)
				}
				if (errs[0] == nil) != (errs[1] == nil) {
					t.Fatalf("engines disagree: %v / %v", errs[0], errs[1])
				}
			}
			passes, incPasses := 0, 0
			for op := 0; op < *incOps; op++ {
				now := inc.now()
				switch x := r.IntN(100); {
				case x < 55: // a write
					row := []byte(fmt.Sprintf("r%02d", r.IntN(30)))
					mu := table.Mutation{Kind: table.SetCell, Family: names[r.IntN(len(names))],
						Qualifier: []byte(fmt.Sprint("q", r.IntN(3))), Value: []byte("v")}
					switch r.IntN(4) {
					case 0:
						mu.Timestamp = table.ServerTimestamp
					case 1:
						mu.Timestamp = now - r.Int64N(4*3600)*1_000_000
					case 2:
						mu.Timestamp = now + r.Int64N(3600)*1_000_000
					default:
						mu.Timestamp = now - r.Int64N(60)*1_000_000
					}
					if r.IntN(3) == 0 {
						mu.TTLMicros = (1 + r.Int64N(7200)) * 1_000_000
					}
					both(func(e *env) error { return e.eng.MutateRow(inst, "t", row, []table.Mutation{mu}) })
				case x < 62: // a delete
					row := []byte(fmt.Sprintf("r%02d", r.IntN(30)))
					mu := table.Mutation{Kind: table.DeleteFromColumn, Family: names[r.IntN(len(names))], Qualifier: []byte(fmt.Sprint("q", r.IntN(3)))}
					if r.IntN(3) == 0 {
						mu = table.Mutation{Kind: table.DeleteFromRow}
					}
					both(func(e *env) error { return e.eng.MutateRow(inst, "t", row, []table.Mutation{mu}) })
				case x < 66: // a rule change
					f, rule := names[r.IntN(len(names))], gcrule.MustParse(incRules[r.IntN(len(incRules))])
					both(func(e *env) error {
						_, err := e.eng.ModifyFamilies(inst, "t", []table.FamilyMod{{Name: f, Update: true, GC: rule}})
						return err
					})
				case x < 68: // a new family, or a dropped one
					if r.IntN(2) == 0 || len(names) < 3 {
						nextFam++
						f, rule := fmt.Sprint("n", nextFam), gcrule.MustParse(incRules[r.IntN(len(incRules))])
						names = append(names, f)
						both(func(e *env) error {
							_, err := e.eng.ModifyFamilies(inst, "t", []table.FamilyMod{{Name: f, Create: true, GC: rule}})
							return err
						})
					} else {
						i := r.IntN(len(names))
						f := names[i]
						names = append(names[:i], names[i+1:]...)
						both(func(e *env) error {
							_, err := e.eng.ModifyFamilies(inst, "t", []table.FamilyMod{{Name: f, Drop: true, IgnoreWarnings: true}})
							return err
						})
					}
				case x < 72:
					both(func(e *env) error { return e.eng.Flush() })
				case x < 88: // time passes
					d := time.Duration(1+r.Int64N(2400)) * time.Second
					for _, e := range envs {
						e.clock.Advance(d)
					}
				case x < 91: // a row of many cells, all expiring: visits delete it by one range deletion
					row := []byte(fmt.Sprintf("b%02d", r.IntN(10)))
					var muts []table.Mutation
					for i := 0; i < 12; i++ {
						muts = append(muts, table.Mutation{Kind: table.SetCell, Family: names[r.IntN(len(names))], Qualifier: []byte(fmt.Sprint("q", i%4)),
							Timestamp: now - int64(i)*1000, Value: []byte("v"), TTLMicros: (1 + r.Int64N(600)) * 1_000_000})
					}
					both(func(e *env) error { return e.eng.MutateRow(inst, "t", row, muts) })
				default: // a pass
					var st [2]PassStats
					for i, e := range envs {
						st[i] = e.pass(t)
					}
					passes++
					if st[0].Incremental > 0 {
						incPasses++
					}
					a, b := rawDump(t, inc, "t"), rawDump(t, whole, "t")
					if fmt.Sprint(a) != fmt.Sprint(b) {
						t.Fatalf("op %d: after a pass (incremental: %v) the stores differ:\nincremental %d cells: %v\nwhole %d cells: %v",
							op, st[0].Incremental > 0, len(a), a, len(b), b)
					}
				}
			}
			if incPasses == 0 {
				t.Fatalf("%d passes, none incremental: the history tested nothing", passes)
			}
			t.Logf("%d passes, %d incremental", passes, incPasses)
		})
	}
}

// TestIncrementalUnderConcurrentWrites: writers add versions, native
// expiries and deletes while incremental passes run and the clock moves;
// once they stop, one more pass leaves nothing a whole sweep would collect.
func TestIncrementalUnderConcurrentWrites(t *testing.T) {
	t.Parallel()
	e := newEnv(t, table.HideEligible, Options{Pause: -1, WholeShare: -1})
	e.create(t, "t", map[string]string{"v": "maxversions=1", "a": "maxage=10m", "n": "never"})
	e.pass(t) // the first pass sweeps whole
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var writes atomic.Int64
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := 0; ctx.Err() == nil; i++ {
				row := []byte(fmt.Sprintf("w%d-%02d", w, r.IntN(20)))
				var mu table.Mutation
				switch r.IntN(4) {
				case 0: // a new version (server times repeat: the fake clock moves in steps)
					mu = table.Mutation{Kind: table.SetCell, Family: "v", Qualifier: []byte("q"), Timestamp: e.now() + int64(i)*1000, Value: []byte("x")}
				case 1:
					mu = table.Mutation{Kind: table.SetCell, Family: "n", Qualifier: []byte("t"), Timestamp: table.ServerTimestamp, Value: []byte("x"), TTLMicros: (1 + r.Int64N(120)) * 1_000_000}
				case 2:
					mu = table.Mutation{Kind: table.SetCell, Family: "a", Qualifier: []byte("q"), Timestamp: table.ServerTimestamp, Value: []byte("x")}
				default:
					mu = table.Mutation{Kind: table.DeleteFromRow}
				}
				if err := e.eng.MutateRow(inst, "t", row, []table.Mutation{mu}); err != nil {
					t.Error(err)
					return
				}
				writes.Add(1)
			}
		}(w)
	}
	for i := 0; i < 20 || (writes.Load() < 1000 && i < 5000); i++ {
		if i%3 == 0 {
			e.clock.Advance(40 * time.Second)
		}
		st, err := e.col.RunPass(context.Background(), Selector{})
		if err != nil {
			t.Fatal(err)
		}
		if st.Incremental == 0 {
			t.Fatalf("pass %d swept whole", i)
		}
	}
	cancel()
	wg.Wait()
	t.Logf("%d writes", writes.Load())
	e.clock.Advance(15 * time.Minute)
	e.pass(t)
	m, _ := e.eng.Table(inst, "t")
	d, err := e.col.DebtOf(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	if d.Cells != 0 {
		t.Fatalf("after the writers stopped, an incremental pass left %d collectable cells", d.Cells)
	}
}

// TestAgendaSettledByWholeSweep: a whole sweep deletes the agenda entries it
// covered and keeps the expiries still ahead; incremental passes delete the
// entries of the rows they visit.
func TestAgendaSettledByWholeSweep(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{Pause: -1, WholeShare: -1})
	e.create(t, "t", map[string]string{"v": "maxversions=1"})
	now := e.now()
	for i := 0; i < 10; i++ {
		e.set(t, "t", fmt.Sprint("r", i), "v", "q", now+int64(i)*1000, 0)
		e.set(t, "t", fmt.Sprint("r", i), "v", "e", now, now+time.Hour.Microseconds())
	}
	m, _ := e.eng.Table(inst, "t")
	counts := func() (int, int) {
		due, later, err := e.eng.AgendaCounts(m, e.now()+1, 1000)
		if err != nil {
			t.Fatal(err)
		}
		return due, later
	}
	if due, later := counts(); due != 10 || later != 10 {
		t.Fatalf("agenda %d due, %d later; want 10 and 10", due, later)
	}
	e.clock.Advance(time.Minute)
	st := e.pass(t)
	if st.Incremental != 0 {
		t.Fatal("the first pass was incremental")
	}
	if due, later := counts(); due != 0 || later != 10 {
		t.Fatalf("after a whole sweep: agenda %d due, %d later; want 0 and 10", due, later)
	}
	e.clock.Advance(2 * time.Hour)
	st = e.pass(t)
	if st.Incremental != 1 || st.VisitedRows != 10 || st.Collected != 10 {
		t.Fatalf("pass %+v; want an incremental pass collecting the 10 expired cells", st)
	}
	if due, later := counts(); due != 0 || later != 0 {
		t.Fatalf("after visiting: agenda %d due, %d later", due, later)
	}
	if !bytes.Equal([]byte(fmt.Sprint(e.stored(t, "t"))), []byte("10")) {
		t.Fatalf("%d cells stored, want 10", e.stored(t, "t"))
	}
}

// TestRepairsMarkAndImportsSweepWhole: a repaired cell puts its row on the
// agenda like a write; imported cells carry no agenda entries, so the pass
// after an import sweeps the table whole.
func TestRepairsMarkAndImportsSweepWhole(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{Pause: -1, WholeShare: -1})
	e.create(t, "t", map[string]string{"v": "maxversions=1"})
	now := e.now()
	e.set(t, "t", "r1", "v", "q", now, 0)
	e.set(t, "t", "r2", "v", "q", now, 0)
	e.clock.Advance(time.Minute)
	e.pass(t) // whole, settles the writes' entries
	m, _ := e.eng.Table(inst, "t")
	if _, err := e.eng.RepairCell(m, table.RawCell{Row: []byte("r1"), Family: "v", Qualifier: []byte("q"), Timestamp: now + 1000, Value: []byte("x"),
		Stamp: storage.Stamp{Commit: now, Cluster: "c2"}}); err != nil {
		t.Fatal(err)
	}
	st := e.pass(t)
	if st.Incremental != 1 || st.VisitedRows != 1 || st.Collected != 1 {
		t.Fatalf("pass after a repair: %+v; want an incremental visit of r1 collecting its older version", st)
	}
	f, _ := m.Family("v")
	k := storage.CellKey(0, []byte("r2"), f.ID, []byte("q"), now+2000)
	if err := e.eng.ImportPairs(m, table.ExportCells, [][2][]byte{{k, storage.EncodeValue([]byte("y"), 0)}}); err != nil {
		t.Fatal(err)
	}
	st = e.pass(t)
	if st.Incremental != 0 || st.Collected != 1 {
		t.Fatalf("pass after an import: %+v; want a whole sweep collecting r2's older version", st)
	}
	if st = e.pass(t); st.Incremental != 1 {
		t.Fatalf("the pass after the whole sweep: %+v; want incremental", st)
	}
}

// TestBecomingLeaderSweepsWhole: a cluster that is not the GC leader visits
// rows but leaves their versions-eligible cells (and deletes their agenda
// entries); once it becomes the leader, its next pass sweeps whole and
// collects them.
func TestBecomingLeaderSweepsWhole(t *testing.T) {
	var leader atomic.Bool
	e := newEnv(t, table.HideEligible, Options{Pause: -1, WholeShare: -1, DecidesVersions: leader.Load})
	e.create(t, "t", map[string]string{"v": "maxversions=1"})
	e.pass(t)
	now := e.now()
	e.set(t, "t", "r", "v", "q", now, 0)
	e.set(t, "t", "r", "v", "q", now+1000, 0)
	if st := e.pass(t); st.Incremental != 1 || st.Collected != 0 {
		t.Fatalf("non-leader pass %+v; want incremental, nothing collected", st)
	}
	leader.Store(true)
	if st := e.pass(t); st.Incremental != 0 || st.Collected != 1 {
		t.Fatalf("first pass as leader %+v; want whole, collecting the older version", st)
	}
}

func rawValue(t *testing.T, it *table.RawIter) []byte {
	t.Helper()
	v, err := it.Value()
	if err != nil {
		t.Fatal(err)
	}
	return v
}
