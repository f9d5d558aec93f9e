package changestream

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	recs := []Record{
		{Type: User, Reason: ReasonUser, RowKey: []byte("r1"), Mods: []Mod{
			{Kind: SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: 1000, Value: []byte("v")},
			{Kind: DeleteFromColumn, Family: "cf", Qualifier: []byte{0, 1}, StartTS: 0, EndTS: 5000},
			{Kind: DeleteFromFamily, Family: "cf"},
			{Kind: DeleteFromRow},
		}},
		{Type: GarbageCollection, Reason: ReasonGCAge, TransactionTag: TagGarbageCollection, IsSystem: true, RowKey: []byte{0xff, 0}},
		{Type: User, Reason: ReasonUser, SourceCluster: "b", RowKey: []byte("r2"), Mods: []Mod{
			{Kind: SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: 2000, Value: []byte("v"), ExpireAt: 9000},
			{Kind: DeleteFromRow},
		}},
	}
	for _, r := range recs {
		got, err := Decode(r.Encode())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(normalize(got), normalize(r)) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, r)
		}
	}
	if _, err := Decode([]byte{9, 1, 0}); err == nil {
		t.Error("unknown version decoded")
	}
	enc := recs[0].Encode()
	for i := 0; i < len(enc); i++ {
		if _, err := Decode(enc[:i]); err == nil {
			t.Errorf("truncated record of %d bytes decoded", i)
		}
	}
}

func normalize(r Record) Record {
	for i := range r.Mods {
		if len(r.Mods[i].Qualifier) == 0 {
			r.Mods[i].Qualifier = nil
		}
		if len(r.Mods[i].Value) == 0 {
			r.Mods[i].Value = nil
		}
	}
	return r
}

func TestKeysOrderAndTokens(t *testing.T) {
	ps := []Position{{1, 0, 0}, {1, 0, 1}, {1, 1, 0}, {2, 0, 0}, {1 << 40, 0, 7}}
	for i := 1; i < len(ps); i++ {
		if !ps[i-1].Less(ps[i]) || bytes.Compare(Key(5, ps[i-1]), Key(5, ps[i])) >= 0 {
			t.Errorf("%v should sort before %v", ps[i-1], ps[i])
		}
		if a := After(5, ps[i-1]); bytes.Compare(a, Key(5, ps[i-1])) <= 0 || bytes.Compare(a, Key(5, ps[i])) >= 0 {
			t.Errorf("After(%v) not between it and the next key", ps[i-1])
		}
	}
	for _, p := range ps {
		id, q, err := DecodeKey(Key(9, p))
		if err != nil || id != 9 || q != p {
			t.Errorf("key round trip of %v: %v %v %v", p, id, q, err)
		}
		q, err = ParseToken(p.Token())
		if err != nil || q != p {
			t.Errorf("token round trip of %v: %v %v", p, q, err)
		}
	}
	for _, bad := range []string{"", "v1", "v2.1.0.0", "v1.x.0.0", "v1.-5.0.0"} {
		if _, err := ParseToken(bad); err == nil {
			t.Errorf("token %q parsed", bad)
		}
	}
	if bytes.Compare(Key(5, Position{Commit: 1 << 62}), TableEnd(5)) >= 0 {
		t.Error("record key past its table's end")
	}
}

func TestJSONBase64(t *testing.T) {
	r := Record{Position: Position{Commit: 1700000000123456}, Type: GarbageCollection, Reason: ReasonCellTTL, IsSystem: true,
		TransactionTag: TagGarbageCollection, RowKey: []byte{0xff, 0xfe},
		Mods: []Mod{{Kind: DeleteFromColumn, Family: "cf", Qualifier: []byte("q"), StartTS: 1000, EndTS: 2000}}}
	line, err := r.MarshalLine()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatal(err)
	}
	if m["row_key"] != "//4=" || m["row_key_base64"] != true || m["type"] != "GARBAGE_COLLECTION" || m["is_system_transaction"] != true {
		t.Errorf("json: %s", line)
	}
	if m["commit_timestamp"] != "2023-11-14T22:13:20.123456Z" {
		t.Errorf("commit_timestamp %v", m["commit_timestamp"])
	}
}

func FuzzDecode(f *testing.F) {
	r := Record{Type: User, Reason: ReasonUser, RowKey: []byte("r"), Mods: []Mod{{Kind: SetCell, Family: "f", Value: []byte("v")}}}
	f.Add(r.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := Decode(b)
		if err != nil {
			return
		}
		again, err := Decode(rec.Encode())
		if err != nil || !reflect.DeepEqual(normalize(again), normalize(rec)) {
			t.Fatalf("re-encoding changed the record: %v", err)
		}
	})
}

func FuzzParseToken(f *testing.F) {
	f.Add(Position{Commit: 1767225600000000, Index: 3}.Token())
	f.Add("v1.1.-1.4294967295")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseToken(s)
		if err != nil {
			return
		}
		q, err := ParseToken(p.Token())
		if err != nil || q != p {
			t.Fatalf("token %q → %v → %q → %v, %v", s, p, p.Token(), q, err)
		}
	})
}
