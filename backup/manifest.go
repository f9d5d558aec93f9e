package backup

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/ebbtable/ebbtable/internal/durable"
	"github.com/ebbtable/ebbtable/table"
)

// Errors besides those of package table (table.ErrInvalid,
// table.ErrPrecondition, table.ErrTableNotFound, table.ErrTableExists),
// which the backup package also returns.
var (
	ErrNotFound = errors.New("ebbtable: backup not found")
	ErrExists   = errors.New("ebbtable: backup already exists")
)

// formatVersion is the manifest format this package writes and reads.
const formatVersion = 1

// manifestFile is the name of the manifest inside a backup directory.
const manifestFile = "MANIFEST.json"

// Name identifies a backup: projects/P/instances/I/clusters/C/backups/ID.
type Name struct {
	// Instance is projects/P/instances/I.
	Instance string
	Cluster  string
	ID       string
}

// String is the backup's resource name.
func (n Name) String() string { return n.Instance + "/clusters/" + n.Cluster + "/backups/" + n.ID }

var (
	backupIDRE  = regexp.MustCompile(`^[_a-zA-Z0-9][-_.a-zA-Z0-9]{0,49}$`)
	clusterIDRE = regexp.MustCompile(`^[a-zA-Z0-9][-_.a-zA-Z0-9]{0,63}$`)
)

// validate checks the parts of a name that become directory names.
func (n Name) validate() error {
	p := strings.Split(n.Instance, "/")
	if len(p) != 4 || p[0] != "projects" || p[2] != "instances" || p[1] == "" || p[3] == "" {
		return fmt.Errorf("%w: %q is not an instance name (projects/PROJECT/instances/INSTANCE)", table.ErrInvalid, n.Instance)
	}
	if !clusterIDRE.MatchString(n.Cluster) {
		return fmt.Errorf("%w: cluster id %q must be 1-64 characters of [-_.a-zA-Z0-9], starting with a letter or digit", table.ErrInvalid, n.Cluster)
	}
	if !backupIDRE.MatchString(n.ID) {
		return fmt.Errorf("%w: backup id %q must be 1-50 characters of [_a-zA-Z0-9][-_.a-zA-Z0-9]*", table.ErrInvalid, n.ID)
	}
	return nil
}

// relDir is the backup's directory under the backups root:
// PROJECT/INSTANCE/CLUSTER/ID, each part escaped.
func (n Name) relDir() string {
	p := strings.Split(n.Instance, "/")
	return filepath.Join(escape(p[1]), escape(p[3]), escape(n.Cluster), n.ID)
}

// escape makes s a safe directory name: bytes outside [-_a-zA-Z0-9] (dots
// included, so never "." or "..") become %XX.
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// State is a backup's life-cycle state, as the Admin API reports it.
type State int

// The states.
const (
	// Creating: the backup is being written; it cannot be restored yet.
	Creating State = iota + 1
	// Ready: the backup is complete and can be restored.
	Ready
)

// FileInfo is one SSTable of a backup.
type FileInfo struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
	Cells int64  `json:"cells"`
}

// Manifest describes a backup. It is the JSON file MANIFEST.json in the
// backup's directory; a directory without one is not a backup.
type Manifest struct {
	Format int `json:"format"`
	// Name is the backup's resource name.
	Name string `json:"name"`
	// SourceTable is the resource name of the table backed up.
	SourceTable string `json:"source_table"`
	// SourceBackup is the resource name of the backup this one is a copy
	// of, if it is one.
	SourceBackup string `json:"source_backup,omitempty"`
	// Schema is the table's schema at the version time: families, their
	// GC rules and value types, splits.
	Schema *table.Meta `json:"schema"`
	// VersionTime is the instant the backup's image shows; StartTime and
	// EndTime bracket its making.
	VersionTime time.Time `json:"version_time"`
	StartTime   time.Time `json:"start_time"`
	EndTime     time.Time `json:"end_time"`
	ExpireTime  time.Time `json:"expire_time"`
	// Hot marks a hot backup (Bigtable keeps those on faster storage for
	// quicker restores; ebbtable has one storage tier, so only the type
	// differs). HotToStandard, when set, is when it turns standard.
	// Automated marks a backup taken by a table's automated backup policy.
	Automated     bool       `json:"automated,omitempty"`
	Hot           bool       `json:"hot,omitempty"`
	HotToStandard *time.Time `json:"hot_to_standard_time,omitempty"`
	// SizeBytes is the total size of the SSTables.
	SizeBytes int64      `json:"size_bytes"`
	Cells     int64      `json:"cells"`
	Files     []FileInfo `json:"files"`
	// Objects and Parts are a cluster backup's (cluster.go): the prefix
	// of its files' names in the shared object store, and its tablets'
	// parts, whose files are named Objects+name (Files is then empty).
	Objects string `json:"objects,omitempty"`
	Parts   []Part `json:"parts,omitempty"`
	// Checksum is the CRC-32C (Castagnoli), in hex, of the manifest's
	// canonical encoding with Checksum empty: a flipped byte that still
	// parses as a manifest (a family id turned into another number) is
	// caught. Manifests written before it existed have none and are read
	// unchecked.
	Checksum string `json:"checksum,omitempty"`

	// State is not stored: a backup on disk is Ready.
	State State `json:"-"`
	// name is Name parsed.
	name Name
}

// BackupName is the parsed resource name.
func (m *Manifest) BackupName() Name { return m.name }

func (m *Manifest) clone() *Manifest {
	c := *m
	c.Files = append([]FileInfo(nil), m.Files...)
	c.Parts = append([]Part(nil), m.Parts...)
	return &c
}

// readManifest loads and checks the manifest of the backup in dir.
func readManifest(dir string, name Name) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("ebbtable: backup manifest %s: %w", dir, err)
	}
	if err := m.verifyChecksum(); err != nil {
		return nil, fmt.Errorf("ebbtable: backup manifest %s: %w", dir, err)
	}
	if m.Format != formatVersion {
		return nil, fmt.Errorf("ebbtable: backup manifest %s: format %d, this version reads %d", dir, m.Format, formatVersion)
	}
	if m.Name != name.String() || m.Schema == nil {
		return nil, fmt.Errorf("ebbtable: backup manifest %s names %q, not %q, or has no schema", dir, m.Name, name)
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("ebbtable: backup manifest %s: %w", dir, err)
	}
	m.name, m.State = name, Ready
	return &m, nil
}

// check refuses a manifest whose contents the backup code would trust
// wrongly: a file name that is not a plain name in the backup's directory
// (restore and copy join it to that directory), negative sizes or counts,
// a schema the engine would not have written.
func (m *Manifest) check() error {
	if m.SizeBytes < 0 || m.Cells < 0 {
		return fmt.Errorf("negative size %d or cell count %d", m.SizeBytes, m.Cells)
	}
	seen := map[string]bool{}
	for _, f := range m.AllFiles() {
		if f.Name == "" || f.Name == "." || f.Name == ".." || strings.ContainsAny(f.Name, "/\\\x00") || f.Name == manifestFile || seen[f.Name] {
			return fmt.Errorf("file name %q is not a plain, unique file name", f.Name)
		}
		seen[f.Name] = true
		if f.Bytes < 0 || f.Cells < 0 {
			return fmt.Errorf("file %s has negative size %d or cell count %d", f.Name, f.Bytes, f.Cells)
		}
	}
	return m.Schema.CheckFamilies()
}

// writeManifest writes m into dir through a temporary file, synced and
// renamed, so a reader sees the old manifest or the new one.
func writeManifest(dir string, m *Manifest) error {
	sum, err := m.checksum()
	if err != nil {
		return err
	}
	c := *m
	c.Checksum = sum
	b, err := json.MarshalIndent(&c, "", "  ")
	if err != nil {
		return fmt.Errorf("ebbtable: encode backup manifest: %w", err)
	}
	return durable.ReplaceFile(filepath.Join(dir, manifestFile), b)
}

// checksum is the manifest's checksum: CRC-32C of its canonical JSON
// encoding with Checksum empty.
func (m *Manifest) checksum() (string, error) {
	c := *m
	c.Checksum = ""
	b, err := json.Marshal(&c)
	if err != nil {
		return "", fmt.Errorf("ebbtable: encode backup manifest: %w", err)
	}
	return fmt.Sprintf("%08x", crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))), nil
}

// verifyChecksum checks a manifest read from disk against its checksum,
// when it has one.
func (m *Manifest) verifyChecksum() error {
	if m.Checksum == "" {
		return nil
	}
	want, err := m.checksum()
	if err != nil {
		return err
	}
	if m.Checksum != want {
		return fmt.Errorf("checksum mismatch (stored %s, computed %s): the file is damaged", m.Checksum, want)
	}
	return nil
}

// mkdirSynced creates dir and any missing parents, syncing each parent
// after a child appears in it.
func mkdirSynced(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirSynced(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return err
	}
	return durable.SyncDir(parent)
}
