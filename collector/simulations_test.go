package collector

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/table"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The vendor page "Simulate cell-level TTL" (seeds 000, 001 and 003, three
// translations of it) describes two ways to give cells their own expiry with
// family GC rules only. These tests run both exactly as the page does, on a
// fake clock, and then show each disadvantage the page lists next to
// ebbtable's native cell TTL, which has none of them.

const (
	second = int64(time.Second / time.Microsecond)
	hour   = int64(time.Hour / time.Microsecond)
	day    = 24 * hour
)

// visibleRows lists the keys of the rows that have a visible cell.
func (e *env) visibleRows(t *testing.T, tbl string) []string {
	t.Helper()
	var rows []string
	for _, c := range e.visible(t, tbl) {
		row, _, _ := strings.Cut(c, "/")
		if len(rows) == 0 || rows[len(rows)-1] != row {
			rows = append(rows, row)
		}
	}
	return rows
}

// collectedFor reads the cells-collected counter of one family and reason.
func (e *env) collectedFor(tbl, fam, reason string) float64 {
	return testutil.ToFloat64(e.col.m.cellsCollected.WithLabelValues(inst, tbl, fam, reason))
}

// TestOneSecondExpiration: family rule maxage=1s, each cell's timestamp set
// to its expiry time. The page's example: a cell stamped April 30, 9:00:00 is
// deleted after 9:00:01. Different cells of the family expire at different
// times.
func TestOneSecondExpiration(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{})
	e.create(t, "sessions", map[string]string{"exp": "maxage=1s"})
	nine := time.Date(2026, 4, 30, 9, 0, 0, 0, time.UTC)
	e.clock.Set(nine.Add(-time.Hour)) // written an hour before they expire
	e.set(t, "sessions", "a", "exp", "token", nine.UnixMicro(), 0)
	e.set(t, "sessions", "b", "exp", "token", nine.Add(time.Hour).UnixMicro(), 0)

	for _, step := range []struct {
		at   time.Duration // after 9:00:00
		want []string
	}{
		{-time.Hour, []string{"a", "b"}},
		{0, []string{"a", "b"}}, // at its expiry time, still there
		{999 * time.Millisecond, []string{"a", "b"}},
		// Exactly one second past, the cell is not yet "older than" now-1s:
		// the age rule is strict, as Cloud Bigtable's max_age is. (The seed
		// says "at least one second in the past"; a microsecond separates
		// the two readings.)
		{time.Second, []string{"a", "b"}},
		{time.Second + time.Microsecond, []string{"b"}},
		{time.Hour, []string{"b"}},
		{time.Hour + time.Second + time.Millisecond, nil},
	} {
		e.clock.Set(nine.Add(step.at))
		if got := e.visibleRows(t, "sessions"); !slices.Equal(got, step.want) {
			t.Fatalf("at %s: visible rows %v, want %v", nine.Add(step.at).Format("15:04:05.000000"), got, step.want)
		}
		if step.at == time.Second {
			// Nothing is eligible yet, so a pass removes nothing.
			if st := e.pass(t); st.Collected != 0 || e.stored(t, "sessions") != 2 {
				t.Fatalf("pass at 9:00:01 collected %d, %d cells stored", st.Collected, e.stored(t, "sessions"))
			}
		}
		if step.at == time.Hour {
			if st := e.pass(t); st.Collected != 1 || e.stored(t, "sessions") != 1 {
				t.Fatalf("pass at 10:00:00 collected %d, %d cells stored, want a removed", st.Collected, e.stored(t, "sessions"))
			}
		}
	}
	if st := e.pass(t); st.Collected != 1 || e.stored(t, "sessions") != 0 {
		t.Fatalf("last pass collected %d, %d cells stored, want b removed", st.Collected, e.stored(t, "sessions"))
	}
	if n := e.collectedFor("sessions", "exp", "age"); n != 2 {
		t.Fatalf("collected for age: %v, want 2 (the family rule did it)", n)
	}
}

// TestDefaultExpiration: the page's example. Click events of ten customers
// in one family with maxage=2d, the default TTL. Customer 1's events should
// expire after an hour, so their timestamps are shifted 2d-1h earlier than
// the write time; customer 2's after three days, so theirs are shifted 1d
// later; everyone else's carry the write time.
func TestDefaultExpiration(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{})
	e.create(t, "clicks", map[string]string{"events": "maxage=2d"})
	const defaultTTL = 2 * day
	written := e.clock.Now()
	w := e.now()
	ttl := map[int]int64{1: hour, 2: 3 * day}
	const eventsPerCustomer = 3
	for c := 1; c <= 10; c++ {
		shift := int64(0) // a default-TTL write keeps its real timestamp
		if d, ok := ttl[c]; ok {
			shift = d - defaultTTL
		}
		for i := int64(0); i < eventsPerCustomer; i++ {
			clickedAt := w - i*1000 // three clicks a millisecond apart, the last now
			e.set(t, "clicks", fmt.Sprintf("customer%02d#%d", c, i), "events", "page", clickedAt+shift, 0)
		}
	}

	all := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	collected := 0
	for _, step := range []struct {
		after time.Duration // since the write
		want  []int         // customers whose events remain
	}{
		{0, all},
		{30 * time.Minute, all},
		{time.Hour + time.Second, all[1:]},     // customer 1's hour is up
		{48*time.Hour + time.Second, []int{2}}, // the default two days are up
		{72*time.Hour + time.Second, nil},      // customer 2's three days are up
	} {
		e.clock.Set(written.Add(step.after))
		var want []string
		for _, c := range step.want {
			for i := 0; i < eventsPerCustomer; i++ {
				want = append(want, fmt.Sprintf("customer%02d#%d", c, i))
			}
		}
		if got := e.visibleRows(t, "clicks"); !slices.Equal(got, want) {
			t.Fatalf("%v after the write: visible %v, want the events of customers %v", step.after, got, step.want)
		}
		// A pass removes exactly what readers no longer see.
		st := e.pass(t)
		collected += int(st.Collected)
		if n := e.stored(t, "clicks"); n != len(want) || collected != 10*eventsPerCustomer-len(want) {
			t.Fatalf("%v after the write: %d cells stored, %d collected in all, want %d stored", step.after, n, collected, len(want))
		}
	}
}

// TestSimulationDisadvantages shows each disadvantage the page lists for the
// simulations with one assertion, and native cell TTL (an ExpireAt that
// leaves the timestamp alone) without it, with another.
func TestSimulationDisadvantages(t *testing.T) {
	write := func(t *testing.T, e *env, fam, row, val string, ts, expireAt int64) {
		t.Helper()
		err := e.eng.MutateRow(inst, "t", []byte(row), []table.Mutation{{Kind: table.SetCell, Family: fam, Qualifier: []byte("q"), Timestamp: ts, Value: []byte(val), ExpireAt: expireAt}})
		if err != nil {
			t.Fatal(err)
		}
	}
	cells := func(t *testing.T, e *env, row string) []cell.Cell {
		t.Helper()
		var out []cell.Cell
		err := e.eng.ReadRows(context.Background(), inst, "t", table.ReadRequest{Keys: [][]byte{[]byte(row)}}, func(r cell.Row) error {
			out = append(out, r.Cells...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	families := map[string]string{"sim": "maxage=1s", "dflt": "maxage=2d", "native": "maxage=2d"}

	t.Run("two cells of a column cannot share an expiry", func(t *testing.T) {
		e := newEnv(t, table.HideEligible, Options{})
		e.create(t, "t", families)
		now := e.now()
		// Two values written a second apart, both meant to expire in an hour.
		expiry := now + hour
		write(t, e, "sim", "sim", "first", expiry, 0)
		write(t, e, "native", "native", "first", now, expiry)
		e.clock.Advance(time.Second)
		write(t, e, "sim", "sim", "second", expiry, 0)
		write(t, e, "native", "native", "second", e.now(), expiry)
		if got := cells(t, e, "sim"); len(got) != 1 || string(got[0].Value) != "second" {
			t.Errorf("simulation: %d cells, want 1 (the second overwrote the first: same timestamp)", len(got))
		}
		if got := cells(t, e, "native"); len(got) != 2 || got[0].ExpireAt != expiry || got[1].ExpireAt != expiry {
			t.Errorf("native TTL: %+v, want both cells, each expiring at %d", got, expiry)
		}
	})

	t.Run("a writer that forgets the convention loses its data", func(t *testing.T) {
		e := newEnv(t, table.HideEligible, Options{})
		e.create(t, "t", families)
		write(t, e, "sim", "sim", "v", table.ServerTimestamp, 0)
		write(t, e, "native", "native", "v", table.ServerTimestamp, 0) // no TTL given
		e.clock.Advance(time.Second + time.Millisecond)
		if got := cells(t, e, "sim"); len(got) != 0 {
			t.Errorf("simulation: a server-time cell still visible after a second: %+v", got)
		}
		if got := cells(t, e, "native"); len(got) != 1 {
			t.Errorf("native TTL: a write without TTL follows the family rule only, got %+v", got)
		}
	})

	t.Run("timestamps lose their meaning", func(t *testing.T) {
		e := newEnv(t, table.HideEligible, Options{})
		e.create(t, "t", families)
		now := e.now()
		write(t, e, "dflt", "dflt", "v", now-(2*day-hour), 0) // 1h TTL by shifting
		write(t, e, "native", "native", "v", now, now+hour)
		if got := cells(t, e, "dflt"); got[0].Timestamp == now {
			t.Error("simulation: the timestamp is the write time")
		}
		if got := cells(t, e, "native"); got[0].Timestamp != now || got[0].ExpireAt != now+hour {
			t.Errorf("native TTL: timestamp %d expiry %d, want the write time %d and %d", got[0].Timestamp, got[0].ExpireAt, now, now+hour)
		}
	})

	t.Run("cannot be used on a family holding real timestamps", func(t *testing.T) {
		e := newEnv(t, table.HideEligible, Options{})
		e.create(t, "t", map[string]string{"sim": "never", "native": "never"})
		now := e.now()
		write(t, e, "sim", "history", "real", now-hour, 0)
		write(t, e, "native", "history", "real", now-hour, 0)
		// Adopting the one-second pattern means rule maxage=1s on the family;
		// native TTL means only writing cells with an expiry.
		if _, err := e.eng.ModifyFamilies(inst, "t", []table.FamilyMod{{Name: "sim", Update: true, GC: gcrule.MaxAge(time.Second)}}); err != nil {
			t.Fatal(err)
		}
		write(t, e, "sim", "new", "v", now+hour, 0)
		write(t, e, "native", "new", "v", now, now+hour)
		var hist []string
		for _, c := range cells(t, e, "history") {
			hist = append(hist, c.Family)
		}
		if !slices.Equal(hist, []string{"native"}) {
			t.Errorf("history cells left: %v, want the native family's only (the simulation's rule took the real-timestamp one)", hist)
		}
	})

	t.Run("a shifted timestamp clashes with a real one", func(t *testing.T) {
		e := newEnv(t, table.HideEligible, Options{})
		e.create(t, "t", families)
		// A 3-day event written yesterday is stamped a day later: now, the
		// real timestamp of an ordinary event written today.
		now := e.now()
		write(t, e, "dflt", "r", "3-day event from yesterday", (now-day)+day, 0)
		write(t, e, "dflt", "r", "today's event", now, 0)
		write(t, e, "native", "r", "3-day event from yesterday", now-day, now+2*day)
		write(t, e, "native", "r", "today's event", now, 0)
		var dflt, native int
		for _, c := range cells(t, e, "r") {
			if c.Family == "dflt" {
				dflt++
			} else {
				native++
			}
		}
		if dflt != 1 {
			t.Errorf("simulation: %d cells, want 1 (today's event overwrote the shifted one)", dflt)
		}
		if native != 2 {
			t.Errorf("native TTL: %d cells, want 2", native)
		}
	})

	t.Run("garbage collection lags, so reads need filters", func(t *testing.T) {
		// In the Bigtable-faithful mode, what a rule makes eligible stays
		// readable until a pass; a native expiry is enforced at read time.
		e := newEnv(t, table.UntilCollected, Options{})
		e.create(t, "t", families)
		now := e.now()
		write(t, e, "sim", "r", "v", now+hour, 0)
		write(t, e, "native", "r", "v", now, now+hour)
		e.clock.Advance(2 * time.Hour)
		var fams []string
		for _, c := range cells(t, e, "r") {
			fams = append(fams, c.Family)
		}
		if !slices.Equal(fams, []string{"sim"}) {
			t.Errorf("visible an hour past both expiries: %v, want the simulated cell only", fams)
		}
		e.pass(t)
		if got := cells(t, e, "r"); len(got) != 0 {
			t.Errorf("after a pass: %+v", got)
		}
		if a, ttl := e.collectedFor("t", "sim", "age"), e.collectedFor("t", "native", "cell-ttl"); a != 1 || ttl != 1 {
			t.Errorf("collected: sim by age %v, native by cell-ttl %v, want 1 and 1", a, ttl)
		}
	})
}
