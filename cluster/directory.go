package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
)

// Errors of the directory model.
var (
	// ErrInvalid: a split key, tablet id or directory that cannot be.
	ErrInvalid = errors.New("ebbtable: invalid tablet operation")
	// ErrConflict: the directory changed since it was read (a fenced
	// transaction lost).
	ErrConflict = errors.New("ebbtable: tablet directory changed concurrently")
	// ErrNoNodes: no live node can take a tablet.
	ErrNoNodes = errors.New("ebbtable: no live node to place tablets on")
)

// Tablet is a key range [Start, End) of one table and the node that owns
// it. An empty Start is the table's first key; an empty End its last.
type Tablet struct {
	ID    uint64 `json:"id"`
	Start []byte `json:"start,omitempty"`
	End   []byte `json:"end,omitempty"`
	Owner string `json:"owner"`
}

// Contains reports whether key falls in the tablet.
func (t Tablet) Contains(key []byte) bool {
	return bytes.Compare(key, t.Start) >= 0 && (len(t.End) == 0 || bytes.Compare(key, t.End) < 0)
}

// String names the tablet for logs and errors.
func (t Tablet) String() string {
	return fmt.Sprintf("tablet %d [%q, %q) on %s", t.ID, t.Start, t.End, t.Owner)
}

// Directory is one table's tablets in key order, contiguous and covering
// every key, as stored in etcd. Revision is the etcd mod revision the
// directory was read at (0 for one not yet stored): an update is fenced on it.
type Directory struct {
	// Table is "instance/table".
	Table      string   `json:"table"`
	TableID    uint64   `json:"table_id"`
	Tablets    []Tablet `json:"tablets"`
	NextTablet uint64   `json:"next_tablet"`
	Revision   int64    `json:"-"`
}

// NewDirectory lays a new table out as one tablet per initial split range,
// owners taken in turn from owners (a placement, see Place).
func NewDirectory(tableName string, tableID uint64, splits [][]byte, owners []string) (Directory, error) {
	if len(owners) == 0 {
		return Directory{}, ErrNoNodes
	}
	ss := make([][]byte, 0, len(splits))
	for _, s := range splits {
		if len(s) > 0 {
			ss = append(ss, append([]byte(nil), s...))
		}
	}
	sort.Slice(ss, func(i, j int) bool { return bytes.Compare(ss[i], ss[j]) < 0 })
	d := Directory{Table: tableName, TableID: tableID}
	var start []byte
	for i := 0; i <= len(ss); i++ {
		var end []byte
		if i < len(ss) {
			end = ss[i]
			if bytes.Equal(end, start) {
				continue
			}
		}
		d.NextTablet++
		d.Tablets = append(d.Tablets, Tablet{ID: d.NextTablet, Start: start, End: end, Owner: owners[len(d.Tablets)%len(owners)]})
		start = end
	}
	return d, d.Validate()
}

// Validate checks the tablets are ordered, contiguous, cover every key and
// have owners and distinct ids below NextTablet.
func (d Directory) Validate() error {
	if len(d.Tablets) == 0 {
		return fmt.Errorf("%w: table %s has no tablets", ErrInvalid, d.Table)
	}
	ids := map[uint64]bool{}
	for i, t := range d.Tablets {
		if t.Owner == "" {
			return fmt.Errorf("%w: tablet %d has no owner", ErrInvalid, t.ID)
		}
		if t.ID == 0 || t.ID > d.NextTablet || ids[t.ID] {
			return fmt.Errorf("%w: tablet id %d duplicated or out of range", ErrInvalid, t.ID)
		}
		ids[t.ID] = true
		if i == 0 && len(t.Start) != 0 {
			return fmt.Errorf("%w: first tablet starts at %q, not the table's start", ErrInvalid, t.Start)
		}
		if i > 0 && !bytes.Equal(d.Tablets[i-1].End, t.Start) {
			return fmt.Errorf("%w: tablets %d and %d are not contiguous", ErrInvalid, d.Tablets[i-1].ID, t.ID)
		}
		last := i == len(d.Tablets)-1
		if last != (len(t.End) == 0) {
			return fmt.Errorf("%w: tablet %d ends at %q", ErrInvalid, t.ID, t.End)
		}
		if !last && bytes.Compare(t.Start, t.End) >= 0 {
			return fmt.Errorf("%w: tablet %d is empty or reversed", ErrInvalid, t.ID)
		}
	}
	return nil
}

// Clone copies the directory so changes to it do not reach d.
func (d Directory) Clone() Directory {
	c := d
	c.Tablets = append([]Tablet(nil), d.Tablets...)
	return c
}

// Locate returns the index of the tablet holding key.
func (d Directory) Locate(key []byte) int {
	// The first tablet whose end is past key.
	return sort.Search(len(d.Tablets), func(i int) bool {
		e := d.Tablets[i].End
		return len(e) == 0 || bytes.Compare(key, e) < 0
	})
}

// Find returns the tablet with the id.
func (d Directory) Find(id uint64) (Tablet, int, bool) {
	for i, t := range d.Tablets {
		if t.ID == id {
			return t, i, true
		}
	}
	return Tablet{}, -1, false
}

// Split cuts the tablet holding key at key: the left part keeps its id, the
// right part [key, end) gets a new id; both keep the owner (a split moves
// no data). Splitting at a tablet's start is an error.
func (d Directory) Split(key []byte) (Directory, error) {
	if len(key) == 0 {
		return d, fmt.Errorf("%w: a split key must not be empty", ErrInvalid)
	}
	i := d.Locate(key)
	t := d.Tablets[i]
	if bytes.Equal(t.Start, key) {
		return d, fmt.Errorf("%w: %q is already a tablet boundary", ErrInvalid, key)
	}
	n := d.Clone()
	n.NextTablet++
	right := Tablet{ID: n.NextTablet, Start: append([]byte(nil), key...), End: t.End, Owner: t.Owner}
	n.Tablets[i].End = right.Start
	n.Tablets = append(n.Tablets[:i+1], append([]Tablet{right}, n.Tablets[i+1:]...)...)
	return n, n.Validate()
}

// Merge joins the tablet with the id and its right neighbour, which must
// have the same owner (merge after moving them together). The merged
// tablet keeps the left id.
func (d Directory) Merge(id uint64) (Directory, error) {
	_, i, ok := d.Find(id)
	if !ok {
		return d, fmt.Errorf("%w: table %s has no tablet %d", ErrInvalid, d.Table, id)
	}
	if i == len(d.Tablets)-1 {
		return d, fmt.Errorf("%w: tablet %d is the last; nothing to merge it with", ErrInvalid, id)
	}
	if d.Tablets[i].Owner != d.Tablets[i+1].Owner {
		return d, fmt.Errorf("%w: tablets %d and %d have different owners", ErrInvalid, id, d.Tablets[i+1].ID)
	}
	n := d.Clone()
	n.Tablets[i].End = n.Tablets[i+1].End
	n.Tablets = append(n.Tablets[:i+1], n.Tablets[i+2:]...)
	return n, n.Validate()
}

// WithOwner gives the tablet with the id to owner.
func (d Directory) WithOwner(id uint64, owner string) (Directory, error) {
	_, i, ok := d.Find(id)
	if !ok {
		return d, fmt.Errorf("%w: table %s has no tablet %d", ErrInvalid, d.Table, id)
	}
	if owner == "" {
		return d, fmt.Errorf("%w: empty owner", ErrInvalid)
	}
	n := d.Clone()
	n.Tablets[i].Owner = owner
	return n, nil
}

// Range is a half-open key range [Start, End); an empty End is unbounded.
type Range struct {
	Start, End []byte
}

// Piece is the part of a request's ranges that falls in one tablet.
type Piece struct {
	Tablet Tablet
	Ranges []Range
	Keys   [][]byte
}

// Cut divides keys and ranges among the tablets, in key order; a tablet
// that gets nothing has no piece. Keys and ranges keep their order within
// a piece.
func (d Directory) Cut(keys [][]byte, ranges []Range) []Piece {
	byTablet := map[int]*Piece{}
	get := func(i int) *Piece {
		p := byTablet[i]
		if p == nil {
			p = &Piece{Tablet: d.Tablets[i]}
			byTablet[i] = p
		}
		return p
	}
	for _, k := range keys {
		i := d.Locate(k)
		p := get(i)
		p.Keys = append(p.Keys, k)
	}
	for _, r := range ranges {
		if len(r.End) != 0 && bytes.Compare(r.Start, r.End) >= 0 {
			continue
		}
		for i := d.Locate(r.Start); i < len(d.Tablets); i++ {
			t := d.Tablets[i]
			if len(r.End) != 0 && bytes.Compare(t.Start, r.End) >= 0 {
				break
			}
			c := Range{Start: r.Start, End: r.End}
			if bytes.Compare(c.Start, t.Start) < 0 {
				c.Start = t.Start
			}
			if len(t.End) != 0 && (len(c.End) == 0 || bytes.Compare(c.End, t.End) > 0) {
				c.End = t.End
			}
			p := get(i)
			p.Ranges = append(p.Ranges, c)
		}
	}
	idx := make([]int, 0, len(byTablet))
	for i := range byTablet {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	out := make([]Piece, 0, len(idx))
	for _, i := range idx {
		out = append(out, *byTablet[i])
	}
	return out
}
