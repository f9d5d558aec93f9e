package backup

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ebbtable/ebbtable/storage"
)

// File kinds Verify checks.
const (
	KindManifest = "backup manifest"
	KindSSTable  = "backup sstable"
)

// Verify checks the backups under a data directory, which no server may be
// using: each backup's MANIFEST.json decodes and names its directory, and
// each SSTable it lists exists with the listed size, passes every block
// checksum and holds the listed number of cells. The manifest has no
// checksum of its own, so a flip that leaves it valid JSON with plausible
// values cannot be seen. Leftovers of interrupted work (removed when the
// server starts) are notes.
func Verify(dataDir string) (*storage.Report, error) {
	rep := storage.NewReport()
	root := filepath.Join(dataDir, "backups")
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return rep, nil
	}
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			rep.Note(KindManifest, filepath.Join(root, e.Name()), "unfinished backup work (the server removes it when it starts)")
		}
	}
	// PROJECT/INSTANCE/CLUSTER/ID
	dirs, err := filepath.Glob(filepath.Join(root, "*", "*", "*", "*"))
	if err != nil {
		return nil, err
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		rel, _ := filepath.Rel(root, dir)
		parts := strings.Split(filepath.ToSlash(rel), "/")
		if strings.HasPrefix(parts[0], ".") {
			continue
		}
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			continue
		}
		verifyBackup(rep, dir, parts)
	}
	return rep, nil
}

func verifyBackup(rep *storage.Report, dir string, parts []string) {
	mpath := filepath.Join(dir, manifestFile)
	rep.Checked[KindManifest]++
	project, err1 := unescape(parts[0])
	instance, err2 := unescape(parts[1])
	cluster, err3 := unescape(parts[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		rep.Damage(KindManifest, dir, "not a backup directory name: %v", err)
		return
	}
	name := Name{Instance: "projects/" + project + "/instances/" + instance, Cluster: cluster, ID: parts[3]}
	mf, err := readManifest(dir, name)
	if err != nil {
		rep.Damage(KindManifest, mpath, "%v", err)
		return
	}
	// Decoding ignores unknown keys; a flip in a key's name would pass it
	// (and lose, say, a family's id), so verify decodes strictly too.
	if raw, err := os.ReadFile(mpath); err == nil {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		var strict Manifest
		if err := dec.Decode(&strict); err != nil {
			rep.Damage(KindManifest, mpath, "%v", err)
		}
	}
	listed := map[string]bool{manifestFile: true, manifestFile + ".tmp": true}
	var size, cells int64
	for _, fi := range mf.Files {
		rep.Checked[KindSSTable]++
		p := filepath.Join(dir, fi.Name)
		if fi.Name != filepath.Base(fi.Name) || fi.Name == manifestFile {
			rep.Damage(KindManifest, mpath, "lists a file named %q", fi.Name)
			continue
		}
		listed[fi.Name] = true
		size += fi.Bytes
		cells += fi.Cells
		st, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			rep.Damage(KindManifest, mpath, "lists %q, which is missing", fi.Name)
			continue
		}
		if err != nil {
			rep.Damage(KindSSTable, p, "%v", err)
			continue
		}
		// Check the file first: an intact file that disagrees with the
		// manifest means the manifest is wrong.
		n, err := storage.VerifySST(p)
		if err != nil {
			rep.Damage(KindSSTable, p, "%v", err)
			continue
		}
		if st.Size() != fi.Bytes || n != fi.Cells {
			rep.Damage(KindManifest, mpath, "says %s is %d bytes with %d cells; it is %d bytes with %d cells and passes its checksums", fi.Name, fi.Bytes, fi.Cells, st.Size(), n)
		}
	}
	if size != mf.SizeBytes || cells != mf.Cells {
		rep.Damage(KindManifest, mpath, "its files add up to %d bytes and %d cells, it says %d and %d", size, cells, mf.SizeBytes, mf.Cells)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !listed[e.Name()] {
			rep.Note(KindSSTable, filepath.Join(dir, e.Name()), "not listed in the backup manifest")
		}
	}
}
