package backup

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/table"
)

// backedUp writes a table, backs it up (several SSTables) and closes
// everything; it returns the data directory and the backup's directory.
func backedUp(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	f := open(t, dir, clock.NewFake(t0))
	if _, err := f.eng.CreateTable(inst, "t", table.TableSpec{Families: []table.FamilySpec{{Name: "cf", GC: gcrule.MustParse("never")}}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2000; i += 200 {
		var rows []table.RowMutation
		for j := i; j < i+200; j++ {
			rows = append(rows, table.RowMutation{Row: []byte(fmt.Sprintf("row%05d", j)), Mutations: []table.Mutation{
				{Kind: table.SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: 1000, Value: []byte(strings.Repeat("v", 40) + fmt.Sprint(j))}}})
		}
		if errs, err := f.eng.MutateRows(inst, "t", rows); err != nil || errs[0] != nil {
			t.Fatal(err, errs[0])
		}
	}
	mf := mustCreate(t, f.mgr, bname("b1"), "t", t0.Add(24*3600e9))
	if len(mf.Files) < 2 {
		t.Fatalf("backup has %d files, want several", len(mf.Files))
	}
	f.close()
	return dir, filepath.Join(dir, "backups", "p", "i", "c1", "b1")
}

func verifyBackups(t *testing.T, dir string) []string {
	t.Helper()
	rep, err := Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checked[KindManifest] != 1 {
		t.Errorf("checked %v", rep.Checked)
	}
	return rep.DamagedFiles()
}

func TestVerifyBackups(t *testing.T) {
	dir, bdir := backedUp(t)
	if d := verifyBackups(t, dir); len(d) != 0 {
		t.Fatalf("healthy backup: damaged %v", d)
	}
	sst := filepath.Join(bdir, "000002.sst")
	raw, err := os.ReadFile(sst)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		b    []byte
	}{
		{"flip", func() []byte { b := append([]byte(nil), raw...); b[len(b)/2] ^= 1; return b }()},
		{"truncate", raw[:len(raw)-1]},
	} {
		os.WriteFile(sst, c.b, 0o644)
		if d := verifyBackups(t, dir); len(d) != 1 || d[0] != sst {
			t.Errorf("%s: damaged %v, want [%s]", c.name, d, sst)
		}
	}
	os.WriteFile(sst, raw, 0o644)

	mpath := filepath.Join(bdir, manifestFile)
	mraw, _ := os.ReadFile(mpath)
	os.WriteFile(mpath, mraw[:len(mraw)/2], 0o644)
	if d := verifyBackups(t, dir); len(d) != 1 || d[0] != mpath {
		t.Errorf("truncated manifest: damaged %v", d)
	}
	// A manifest whose cell count was changed (still valid JSON).
	os.WriteFile(mpath, []byte(strings.Replace(string(mraw), `"cells": `, `"cells": 1`, 1)), 0o644)
	if d := verifyBackups(t, dir); len(d) == 0 {
		t.Errorf("manifest with a wrong cell count passed")
	}
}
