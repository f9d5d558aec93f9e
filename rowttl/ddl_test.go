package rowttl

import (
	"errors"
	"testing"

	"github.com/ebbtable/ebbtable/table"
)

// FuzzParse: no statement panics, every error wraps ErrInvalid, and a
// policy that parses is within bounds.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"ALTER TABLE events ADD ROW DELETION POLICY (OLDER_THAN(`meta:created_at`, INTERVAL 30 DAY))",
		`ALTER TABLE events ADD TTL INTERVAL '4 DAYS 2 MINUTES - 2 MINUTES' ON "meta:created_at"`,
		`ALTER TABLE events ALTER TTL INTERVAL '1.5 days 12 hours' ON "m:c";`,
		`ALTER TABLE "a""b" DROP TTL`,
		`ALTER TABLE t SET INTERLEAVE SEPARATOR '#'''`,
		"CREATE TABLE t (`a:b` INT64) PRIMARY KEY (`a:b`), ROW DELETION POLICY (OLDER_THAN(`a:b`, INTERVAL 0x10 DAY))",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		st, err := Parse(s)
		if err != nil {
			if !errors.Is(err, table.ErrInvalid) {
				t.Fatalf("Parse(%q): error %v does not wrap ErrInvalid", s, err)
			}
			return
		}
		if st.HasPolicy && (st.Policy.Days < 0 || st.Policy.Days > MaxDays || st.Policy.Family == "") {
			t.Fatalf("Parse(%q) = out-of-bounds policy %+v", s, st.Policy)
		}
	})
}

// FuzzIntervalDays: no interval panics; an accepted one is within bounds
// and survives being written back as 'N days'.
func FuzzIntervalDays(f *testing.F) {
	for _, s := range []string{"3 DAYS", "4 DAYS 2 MINUTES - 2 MINUTES", "4 DAYS 3 MINUTES", "-1 day", "1.5 days 12 hours", "2 weeks"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := IntervalDays(s)
		if err != nil {
			return
		}
		if d < 0 || d > MaxDays {
			t.Fatalf("IntervalDays(%q) = %d out of bounds", s, d)
		}
	})
}
