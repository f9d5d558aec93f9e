package backup

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/table"
)

// FuzzReadManifest feeds arbitrary MANIFEST.json contents to readManifest,
// the check every backup passes when the manager loads it (and before a
// restore or copy trusts its file list and schema). An accepted manifest
// names only plain files of its own directory, has no negative sizes, a
// schema the engine would accept, and writes back to a manifest that reads
// the same.
func FuzzReadManifest(f *testing.F) {
	name := Name{Instance: inst, Cluster: "c1", ID: "b1"}
	good := &Manifest{
		Format: formatVersion, Name: name.String(), SourceTable: inst + "/tables/t",
		Schema: &table.Meta{ID: 7, Instance: inst, Name: "t", NextFamilyID: 2, Families: []table.Family{
			{ID: 1, Name: "cf", GC: gcrule.MustParse("maxage=1d || maxversions=2")},
			{ID: 2, Name: "agg", GC: gcrule.None(), Aggregate: table.AggSum}}},
		VersionTime: t0, StartTime: t0, EndTime: t0, ExpireTime: t0.AddDate(0, 0, 7),
		SizeBytes: 2048, Cells: 10, Files: []FileInfo{{Name: "000001.sst", Bytes: 1024, Cells: 6}, {Name: "000002.sst", Bytes: 1024, Cells: 4}},
	}
	b, err := json.MarshalIndent(good, "", "  ")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	for _, bad := range []string{`"000001.sst"`, `"000002.sst"`} {
		for _, repl := range []string{`"../../../etc/passwd"`, `"."`, `"MANIFEST.json"`, `"a/b"`, `""`} {
			f.Add([]byte(strings.Replace(string(b), bad, repl, 1)))
		}
	}
	f.Add([]byte(strings.Replace(string(b), `"id": 2,`, `"id": 1,`, 1)))
	f.Add([]byte(strings.Replace(string(b), `"next_family_id": 2`, `"next_family_id": 1`, 1)))
	f.Add([]byte(strings.Replace(string(b), `"name": "agg"`, `"name": "cf"`, 1)))
	f.Add([]byte(strings.Replace(string(b), `"bytes": 1024`, `"bytes": -1`, 1)))
	f.Add([]byte(`{"format":1,"name":"` + name.String() + `","schema":{}}`))
	f.Add([]byte(`{"format":1,"name":"` + name.String() + `","schema":null}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, manifestFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := readManifest(dir, name)
		if err != nil {
			return
		}
		for _, fi := range m.Files {
			if fi.Name == "" || filepath.Base(fi.Name) != fi.Name || fi.Name == "." || fi.Name == ".." || fi.Name == manifestFile {
				t.Fatalf("accepted file name %q", fi.Name)
			}
			if fi.Bytes < 0 || fi.Cells < 0 {
				t.Fatalf("accepted file %+v", fi)
			}
		}
		if m.SizeBytes < 0 || m.Cells < 0 {
			t.Fatalf("accepted size %d, cells %d", m.SizeBytes, m.Cells)
		}
		if err := m.Schema.CheckFamilies(); err != nil {
			t.Fatalf("accepted schema: %v", err)
		}
		if err := writeManifest(dir, m); err != nil {
			t.Fatal(err)
		}
		again, err := readManifest(dir, name)
		if err != nil {
			t.Fatalf("a manifest read back after writing it: %v", err)
		}
		if !reflect.DeepEqual(again.Files, m.Files) || !reflect.DeepEqual(again.Schema.Families, m.Schema.Families) || again.Cells != m.Cells {
			t.Fatalf("manifest changed when written and read again:\n%+v\n%+v", m, again)
		}
	})
}
