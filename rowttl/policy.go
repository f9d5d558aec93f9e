package rowttl

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"regexp"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/table"
)

// MaxDays bounds a policy's interval (about 10,000 years), so timestamp
// arithmetic never overflows.
const MaxDays = 3_650_000

const microsPerDay = int64(24 * time.Hour / time.Microsecond)

// Policy is a row deletion policy: delete a row once the newest value of
// its column Family:Qualifier, read as a timestamp, is older than Days days.
type Policy struct {
	Family    string
	Qualifier []byte
	Days      int64
}

// FromTable converts the engine's stored form.
func FromTable(p table.RowPolicy) Policy {
	return Policy{Family: p.Family, Qualifier: p.Qualifier, Days: p.Days}
}

// Table converts to the engine's stored form.
func (p Policy) Table() table.RowPolicy {
	return table.RowPolicy{Family: p.Family, Qualifier: p.Qualifier, Days: p.Days}
}

// Column is the policy's column as DDL writes it, family:qualifier.
func (p Policy) Column() string { return p.Family + ":" + string(p.Qualifier) }

var plainIdent = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Expression prints the policy as Spanner's
// INFORMATION_SCHEMA.TABLES.ROW_DELETION_POLICY_EXPRESSION does:
// OLDER_THAN(col, INTERVAL 30 DAY). A column that is not a plain
// identifier (every family:qualifier is not) is backquoted.
func (p Policy) Expression() string {
	col := p.Column()
	if !plainIdent.MatchString(col) {
		col = "`" + col + "`"
	}
	return fmt.Sprintf("OLDER_THAN(%s, INTERVAL %d DAY)", col, p.Days)
}

// parseColumn splits a DDL column name family:qualifier.
func parseColumn(s string) (family string, qualifier []byte, err error) {
	i := bytes.IndexByte([]byte(s), ':')
	if i <= 0 {
		return "", nil, fmt.Errorf("%w: row deletion policy column %q must be written family:qualifier (backquoted in GoogleSQL, double-quoted in PostgreSQL)", table.ErrInvalid, s)
	}
	return s[:i], []byte(s[i+1:]), nil
}

// State is what a policy makes of one row.
type State int

// The states of a row under a policy.
const (
	// Null: the row has no value in the policy's column; never deleted.
	Null State = iota
	// Live: the timestamp is not old enough yet.
	Live
	// Expired: the row is eligible for deletion.
	Expired
	// Unparsable: the value is not a timestamp; the row is undeletable.
	Unparsable
)

// ParseTimestamp reads a cell value as a timestamp in microseconds: 8 bytes
// are a big-endian int64 of microseconds since the Unix epoch, anything else
// must be RFC 3339 text.
func ParseTimestamp(v []byte) (int64, bool) {
	if len(v) == 8 {
		return int64(binary.BigEndian.Uint64(v)), true
	}
	t, err := time.Parse(time.RFC3339Nano, string(bytes.TrimSpace(v)))
	if err != nil {
		return 0, false
	}
	return t.UnixMicro(), true
}

// Evaluate judges a row at now (micros) and returns its state and, unless
// Null or Unparsable, its timestamp. A row is expired when its timestamp is
// strictly older than now minus the interval, so INTERVAL 0 DAY deletes a
// row as soon as its timestamp has passed.
func (p Policy) Evaluate(cells []cell.Cell, now int64) (State, int64) {
	for _, c := range cells {
		// Cells come in column order, newest version first.
		if c.Family != p.Family || !bytes.Equal(c.Qualifier, p.Qualifier) {
			continue
		}
		ts, ok := ParseTimestamp(c.Value)
		if !ok {
			return Unparsable, 0
		}
		if ts < now-p.Days*microsPerDay {
			return Expired, ts
		}
		return Live, ts
	}
	return Null, 0
}

// RowExpired is the engine's read hook (table.RowExpiry): readers in the
// default mode do not see a row its policy has expired.
func RowExpired(m *table.Meta, row cell.Row, now int64) bool {
	if m.RowPolicy == nil {
		return false
	}
	st, _ := FromTable(*m.RowPolicy).Evaluate(row.Cells, now)
	return st == Expired
}
