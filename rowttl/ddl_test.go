package rowttl

import (
	"errors"
	"testing"

	"github.com/ebbtable/ebbtable/table"
)

func TestIntervalDays(t *testing.T) {
	for _, tc := range []struct {
		in   string
		days int64
		err  bool
	}{
		{"30 days", 30, false},
		{"3 DAYS", 3, false},
		{"1 day", 1, false},
		{"0 days", 0, false},
		{"4 DAYS 2 MINUTES - 2 MINUTES", 4, false},
		{"4 days 2 minutes -2 minutes", 4, false},
		{"2 weeks", 14, false},
		{"48 hours", 2, false},
		{"1.5 days 12 hours", 2, false},
		{"1 day 86400 seconds", 2, false},
		{"5 days -1 day", 4, false},
		{"+3 days", 3, false},
		{"  7   days  ", 7, false},
		{"4 DAYS 3 MINUTES", 0, true},
		{"-3 days", 0, true},
		{"1 day - 2 days", 0, true},
		{"12 hours", 0, true},
		{"1 month", 0, true},
		{"1 year", 0, true},
		{"3", 0, true},
		{"days", 0, true},
		{"", 0, true},
		{"3 fortnights", 0, true},
		{"1.2.3 days", 0, true},
		{"99999999999999999999 days", 0, true},
	} {
		got, err := IntervalDays(tc.in)
		if (err != nil) != tc.err || got != tc.days {
			t.Errorf("IntervalDays(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.days, tc.err)
		}
		if err != nil && !errors.Is(err, table.ErrInvalid) {
			t.Errorf("IntervalDays(%q): error %v does not wrap ErrInvalid", tc.in, err)
		}
	}
}

func TestParse(t *testing.T) {
	pol := func(fam, q string, days int64) Policy { return Policy{Family: fam, Qualifier: []byte(q), Days: days} }
	for _, tc := range []struct {
		in     string
		action Action
		table  string
		policy Policy
		expr   string
		sep    string
		err    string // substring of the error, "" for none
	}{
		{in: "ALTER TABLE events ADD ROW DELETION POLICY (OLDER_THAN(`meta:created_at`, INTERVAL 30 DAY))",
			action: AddPolicy, table: "events", policy: pol("meta", "created_at", 30), expr: "OLDER_THAN(`meta:created_at`, INTERVAL 30 DAY)"},
		{in: "alter table events replace row deletion policy (older_than(`meta:ts`, interval 0 day));",
			action: ReplacePolicy, table: "events", policy: pol("meta", "ts", 0)},
		{in: "ALTER TABLE events DROP ROW DELETION POLICY", action: DropPolicy, table: "events"},
		{in: "CREATE TABLE orders (`o:id` STRING(MAX), `meta:created_at` TIMESTAMP) PRIMARY KEY (`o:id`), ROW DELETION POLICY (OLDER_THAN(`meta:created_at`, INTERVAL 7 DAY))",
			action: CreateTable, table: "orders", policy: pol("meta", "created_at", 7)},
		{in: `ALTER TABLE events ADD TTL INTERVAL '30 days' ON "meta:created_at"`,
			action: AddPolicy, table: "events", policy: pol("meta", "created_at", 30)},
		{in: `alter table "events" alter ttl interval '4 DAYS 2 MINUTES - 2 MINUTES' on "meta:c";`,
			action: ReplacePolicy, table: "events", policy: pol("meta", "c", 4)},
		{in: `ALTER TABLE events DROP TTL`, action: DropPolicy, table: "events"},
		{in: `ALTER TABLE t SET INTERLEAVE SEPARATOR '#'`, action: SetSeparator, table: "t", sep: "#"},
		{in: `ALTER TABLE t DROP INTERLEAVE SEPARATOR;`, action: DropSeparator, table: "t"},
		{in: `ALTER TABLE events ADD TTL INTERVAL '4 DAYS 3 MINUTES' ON "meta:c"`, err: "whole number of days"},
		{in: `ALTER TABLE events ADD TTL INTERVAL '-4 DAYS' ON "meta:c"`, err: "negative"},
		{in: `ALTER TABLE events ADD TTL INTERVAL '4 DAYS' ON created_at`, err: "family:qualifier"},
		{in: `ALTER TABLE events ADD TTL INTERVAL '4 DAYS' ON "meta:c" extra`, err: "unexpected text"},
		{in: `ALTER TABLE events ADD TTL '4 DAYS' ON "meta:c"`, err: "expected INTERVAL"},
		{in: `ALTER TABLE events ADD TTL INTERVAL '4 DAYS ON "meta:c"`, err: "unterminated"},
		{in: `ALTER TABLE t SET INTERLEAVE SEPARATOR ''`, err: "must not be empty"},
		{in: "ALTER TABLE events ADD ROW DELETION POLICY (OLDER_THAN(created_at, INTERVAL 30 DAY))", err: "family:qualifier"},
		{in: "ALTER TABLE events ADD ROW DELETION POLICY (OLDER_THAN(`m:c`, INTERVAL 30 HOUR))", err: "DDL"},
		{in: "ALTER TABLE events ADD COLUMN x INT64", err: "only ADD, REPLACE and DROP ROW DELETION POLICY"},
		{in: "DROP TABLE events", err: "unsupported statement"},
		{in: "SELECT 1", err: "DDL"},
	} {
		st, err := Parse(tc.in)
		if tc.err != "" {
			if err == nil || !errors.Is(err, table.ErrInvalid) || !contains(err.Error(), tc.err) {
				t.Errorf("Parse(%q) error = %v; want one containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if st.Action != tc.action || st.Table != tc.table || st.Separator != tc.sep ||
			st.Policy.Family != tc.policy.Family || string(st.Policy.Qualifier) != string(tc.policy.Qualifier) || st.Policy.Days != tc.policy.Days {
			t.Errorf("Parse(%q) = %+v; want action %d table %s policy %+v sep %q", tc.in, st, tc.action, tc.table, tc.policy, tc.sep)
		}
		if tc.expr != "" && st.Policy.Expression() != tc.expr {
			t.Errorf("Parse(%q): expression %s, want %s", tc.in, st.Policy.Expression(), tc.expr)
		}
	}
}

func TestParsePolicy(t *testing.T) {
	for in, want := range map[string]string{
		"OLDER_THAN(`m:ts`, INTERVAL 30 DAY)":  "OLDER_THAN(`m:ts`, INTERVAL 30 DAY)",
		"(OLDER_THAN(`m:ts`, INTERVAL 1 DAY))": "OLDER_THAN(`m:ts`, INTERVAL 1 DAY)",
		`INTERVAL '2 weeks' ON "m:ts"`:         "OLDER_THAN(`m:ts`, INTERVAL 14 DAY)",
		`interval '0 days' on "m:created at"`:  "OLDER_THAN(`m:created at`, INTERVAL 0 DAY)",
	} {
		p, err := ParsePolicy(in)
		if err != nil || p.Expression() != want {
			t.Errorf("ParsePolicy(%q) = %s, %v; want %s", in, p.Expression(), err, want)
		}
	}
	if _, err := ParsePolicy("OLDER_THAN(x)"); err == nil {
		t.Error("ParsePolicy accepted a malformed policy")
	}
}

func contains(s, sub string) bool { return len(sub) == 0 || indexOf(s, sub) >= 0 }

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

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
