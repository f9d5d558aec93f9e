package storage

import (
	"encoding/binary"
	"fmt"
)

// tagAgenda starts the GC agenda's keys: tagAgenda | tableID | due | row.
// An entry says a row must be judged by the collector once its due time
// (microseconds, big-endian) has come; the row key is raw (it is last).
// Entries have empty values. See docs/storage-format.md.
const tagAgenda byte = 0x04

// AgendaKey is the agenda entry of row in table tableID, due at due.
func AgendaKey(tableID uint64, due int64, row []byte) []byte {
	k := make([]byte, 0, 17+len(row))
	k = append(k, tagAgenda)
	k = binary.BigEndian.AppendUint64(k, tableID)
	k = binary.BigEndian.AppendUint64(k, uint64(max(due, 0)))
	return append(k, row...)
}

// AgendaPrefix is the first key of a table's agenda.
func AgendaPrefix(tableID uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{tagAgenda}, tableID)
}

// AgendaEnd is the key just past a table's agenda.
func AgendaEnd(tableID uint64) []byte { return AgendaPrefix(tableID + 1) }

// AgendaDueBound is the first key of a table's entries due at or after due:
// the exclusive bound of the entries due before it.
func AgendaDueBound(tableID uint64, due int64) []byte {
	return binary.BigEndian.AppendUint64(AgendaPrefix(tableID), uint64(max(due, 0)))
}

// DecodeAgendaKey takes an agenda key apart; row aliases k.
func DecodeAgendaKey(k []byte) (tableID uint64, due int64, row []byte, err error) {
	if len(k) < 17 || k[0] != tagAgenda {
		return 0, 0, nil, fmt.Errorf("%w: agenda key %x", ErrCorruptKey, k)
	}
	return binary.BigEndian.Uint64(k[1:9]), int64(binary.BigEndian.Uint64(k[9:17])), k[17:], nil
}
