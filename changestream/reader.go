package changestream

// Iter walks raw keys in order (a *table.RawIter).
type Iter interface {
	First() bool
	Last() bool
	Next() bool
	Key() []byte
	Value() ([]byte, error)
	Error() error
	Close() error
}

// Store is what the reader needs from the database: an iterator over the
// keys in [lower, upper).
type Store interface {
	Iter(lower, upper []byte) (Iter, error)
}

// Read returns, in commit order, up to limit records of table tableID whose
// keys are at or after lower (from TimeKey or After) and whose commit
// timestamp is at most upTo. Callers pass a closed timestamp as upTo, so no
// record can later commit inside what they have read.
func Read(db Store, tableID uint64, lower []byte, upTo int64, limit int) ([]Record, error) {
	if upTo < 0 {
		return nil, nil
	}
	it, err := db.Iter(lower, TimeKey(tableID, upTo+1))
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []Record
	for ok := it.First(); ok && (limit <= 0 || len(out) < limit); ok = it.Next() {
		_, pos, err := DecodeKey(it.Key())
		if err != nil {
			return nil, err
		}
		v, err := it.Value()
		if err != nil {
			return nil, err
		}
		r, err := Decode(v)
		if err != nil {
			return nil, err
		}
		r.Position = pos
		out = append(out, r)
	}
	return out, it.Error()
}

// Last returns the position of the newest record of a table, and false if
// it has none.
func Last(db Store, tableID uint64) (Position, bool, error) {
	it, err := db.Iter(TableStart(tableID), TableEnd(tableID))
	if err != nil {
		return Position{}, false, err
	}
	defer it.Close()
	if !it.Last() {
		return Position{}, false, it.Error()
	}
	_, p, err := DecodeKey(it.Key())
	return p, err == nil, err
}
