package server

import (
	"reflect"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/replication"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/protobuf/proto"
)

// TestPullEncodingRoundTrip: a pull request and its answer come through
// the EbbAdmin messages (and the wire) as they went in.
func TestPullEncodingRoundTrip(t *testing.T) {
	pos := changestream.Position{Commit: 1_700_000_000_000_001, Tiebreaker: -3, Index: 2}
	req := replication.PullRequest{Cluster: "b", Addr: "127.0.0.1:9", Wait: 250 * time.Millisecond, Limit: 2000,
		Positions: map[string]changestream.Position{replication.TableKey("inst", "t"): pos}}
	got, err := decodePullRequest(wire(t, encodePullRequest(req)))
	if err != nil || !reflect.DeepEqual(got, req) {
		t.Fatalf("request: %+v %v, want %+v", got, err, req)
	}
	bad := &ebbadminpb.PullRequest{Cluster: "b", Positions: map[string]*ebbadminpb.Position{"k": {Commit: -1}}}
	if _, err := decodePullRequest(bad); codeOf(err).String() != "InvalidArgument" {
		t.Fatalf("a bad position: %v", err)
	}
	if _, err := decodePullRequest(&ebbadminpb.PullRequest{Cluster: "b", Limit: -1}); codeOf(err).String() != "InvalidArgument" {
		t.Fatalf("a negative limit: %v", err)
	}

	rec := changestream.Record{Position: pos, Type: changestream.User, RowKey: []byte("r\x00\xff"),
		Mods: []changestream.Mod{{Kind: changestream.SetCell, Family: "f", Qualifier: []byte("q"), Timestamp: 1000, Value: []byte{0, 1, 2, 255}}}}
	resp := &replication.PullResponse{
		Cluster: "a", Closed: 1_700_000_000_000_009,
		Tables: []replication.PulledTable{{Instance: "inst", Table: "t", Records: []changestream.Record{rec}, Through: pos, Full: true}},
		Catalog: []replication.TableSchema{{Instance: "inst", Name: "t", Stamp: storage.Stamp{Commit: 5, Cluster: "a"},
			Families: []replication.FamilySchema{{Name: "f", GC: gcrule.Union(gcrule.MaxVersions(2), gcrule.MaxAge(time.Hour)),
				ValueType: []byte{1, 2}, Aggregate: table.AggSum}}}},
		Dropped:      []table.DroppedTable{{Instance: "inst", Name: "old", Stamp: storage.Stamp{Commit: 7, Cluster: "b"}}},
		Peers:        []replication.PeerInfo{{ID: "a", Addr: "x:1", Ready: true}, {ID: "c", Addr: "x:3"}},
		InstanceMeta: []replication.MetaEntry{{Kind: kindAppProfile, Instance: "inst", Name: "p", Value: "{}"}},
		AgeCutoffs:   map[replication.FamilyKey]int64{{Instance: "inst", Table: "t", Family: "f"}: 123},
		Shipped:      1,
	}
	back, err := decodePullResponse(wire(t, encodePullResponse(resp)))
	if err != nil {
		t.Fatal(err)
	}
	// Rules compare with Equal.
	if !back.Catalog[0].Families[0].GC.Equal(resp.Catalog[0].Families[0].GC) {
		t.Fatalf("rule: %v", back.Catalog[0].Families[0].GC)
	}
	back.Catalog[0].Families[0].GC, resp.Catalog[0].Families[0].GC = gcrule.Rule{}, gcrule.Rule{}
	if !reflect.DeepEqual(back, resp) {
		t.Fatalf("answer:\n got %+v\nwant %+v", back, resp)
	}
}

// TestSnapshotMetaRoundTrip: a table's whole schema comes through a
// snapshot's TableMeta as it went in. Every field of table.Meta (and of
// the structs it holds) is set, so a field added there without a place in
// the message fails this test.
func TestSnapshotMetaRoundTrip(t *testing.T) {
	rule := gcrule.Intersection(gcrule.MaxAge(90*time.Minute), gcrule.Union(gcrule.MaxVersions(3)))
	m := &table.Meta{}
	fill(t, reflect.ValueOf(m).Elem(), "Meta")
	for i := range m.Families {
		m.Families[i].GC = rule
	}
	msg := snapshotMessage(replication.SnapshotItem{Kind: replication.SnapshotTable, Meta: m})
	got, err := metaOf(wire(t, msg).GetTable())
	if err != nil {
		t.Fatal(err)
	}
	for i := range got.Families {
		if !got.Families[i].GC.Equal(rule) {
			t.Fatalf("family %d rule %v, want %v", i, got.Families[i].GC, rule)
		}
		got.Families[i].GC, m.Families[i].GC = gcrule.Rule{}, gcrule.Rule{}
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("schema:\n got %+v\nwant %+v", got, m)
	}
	// No rule stays no rule.
	if r, err := gcRuleOf(gcRulePB(gcrule.None())); err != nil || !r.Equal(gcrule.None()) {
		t.Fatalf("no rule: %v %v", r, err)
	}
}

// fill sets every field of v to a value that is not its zero (gcrule.Rule,
// whose fields are unexported, is left to the caller).
func fill(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	switch v.Kind() {
	case reflect.String:
		v.SetString(path)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(len(path)) + 1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(len(path)) + 2)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fill(t, s.Index(i), path+"[]")
		}
		v.Set(s)
	case reflect.Map:
		mv := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, k, path+"k")
		fill(t, e, path+"v")
		mv.SetMapIndex(k, e)
		v.Set(mv)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(t, p.Elem(), path)
		v.Set(p)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(gcrule.Rule{}) {
			return
		}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				t.Fatalf("%s.%s is unexported: fill cannot set it", path, f.Name)
			}
			fill(t, v.Field(i), path+"."+f.Name)
		}
	default:
		t.Fatalf("%s: fill does not know kind %s", path, v.Kind())
	}
}

// wire sends a message through its binary encoding, as gRPC does.
func wire[M proto.Message](t *testing.T, m M) M {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	out := m.ProtoReflect().New().Interface().(M)
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}
