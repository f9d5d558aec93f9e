package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/batchrepr"
	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/cockroachdb/pebble/v2/record"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/wal"
)

// File kinds a verification checks; Report.Checked counts files by them.
const (
	KindSSTable  = "sstable"
	KindWAL      = "wal"
	KindManifest = "manifest"
	KindOptions  = "options"
)

// Errors of Verify when it cannot check a directory at all.
var (
	// ErrInUse: a process (a running server) holds the directory's lock.
	ErrInUse = errors.New("ebbtable: the data directory is in use")
	// ErrNotDataDir: the directory holds no ebbtable database.
	ErrNotDataDir = errors.New("ebbtable: not an ebbtable data directory")
)

// Finding is one thing a verification found wrong with a file: damage, or a
// note about something harmless an operator may want to know (a torn WAL
// tail, a file no one references).
type Finding struct {
	Path    string
	Kind    string
	Damaged bool
	Problem string
}

func (f Finding) String() string {
	if f.Damaged {
		return fmt.Sprintf("DAMAGED %s: %s", f.Path, f.Problem)
	}
	return fmt.Sprintf("note %s: %s", f.Path, f.Problem)
}

// Report is what a verification checked and found.
type Report struct {
	// Checked counts the files checked, by kind.
	Checked  map[string]int
	Findings []Finding
}

// NewReport returns an empty report.
func NewReport() *Report { return &Report{Checked: map[string]int{}} }

// Damage records damage in a file.
func (r *Report) Damage(kind, path, format string, args ...any) {
	r.Findings = append(r.Findings, Finding{Path: path, Kind: kind, Damaged: true, Problem: fmt.Sprintf(format, args...)})
}

// Note records a harmless finding.
func (r *Report) Note(kind, path, format string, args ...any) {
	r.Findings = append(r.Findings, Finding{Path: path, Kind: kind, Problem: fmt.Sprintf(format, args...)})
}

// Merge adds o's counts and findings to r.
func (r *Report) Merge(o *Report) {
	for k, n := range o.Checked {
		r.Checked[k] += n
	}
	r.Findings = append(r.Findings, o.Findings...)
}

// DamagedFiles lists the damaged files, each once, in the order found.
func (r *Report) DamagedFiles() []string {
	var out []string
	seen := map[string]bool{}
	for _, f := range r.Findings {
		if f.Damaged && !seen[f.Path] {
			seen[f.Path] = true
			out = append(out, f.Path)
		}
	}
	return out
}

// Verify checks the Pebble database in dir, which no process may have open:
// every block checksum of every SSTable, the framing and checksums of every
// WAL record and that each decodes as a batch, the MANIFEST's framing, that
// its version edits decode and that the tables they reference exist with
// their recorded sizes, and the OPTIONS file. A torn tail at the end of the
// newest WAL (a write cut short by a crash) is a note, not damage; a bad
// record anywhere else is damage.
//
// The error is for a directory that cannot be verified (ErrInUse,
// ErrNotDataDir, I/O errors listing it); damage is in the report.
func Verify(dir string) (*Report, error) {
	fs := vfs.Default
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s does not exist", ErrNotDataDir, dir)
		}
		return nil, fmt.Errorf("ebbtable: verify %s: %w", dir, err)
	}
	desc, err := pebble.Peek(dir, fs)
	if err != nil {
		return nil, fmt.Errorf("ebbtable: verify %s: %w", dir, err)
	}
	if !desc.Exists {
		return nil, fmt.Errorf("%w: %s has no MANIFEST", ErrNotDataDir, dir)
	}
	lock, err := pebble.LockDirectory(dir, fs)
	if err != nil {
		if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) || strings.Contains(err.Error(), "lock held") {
			return nil, fmt.Errorf("%w: %s is locked by another process (a running server?); stop it first, verify reads the files offline", ErrInUse, dir)
		}
		return nil, fmt.Errorf("ebbtable: verify %s: lock: %w", dir, err)
	}
	defer lock.Close()

	names, err := fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("ebbtable: verify %s: %w", dir, err)
	}
	sort.Strings(names)
	rep := NewReport()
	var ssts, manifests, options []string
	for _, n := range names {
		switch {
		case sstName.MatchString(n):
			ssts = append(ssts, n)
		case strings.HasPrefix(n, "MANIFEST-"):
			manifests = append(manifests, n)
		case strings.HasPrefix(n, "OPTIONS-"):
			options = append(options, n)
		}
	}

	for _, n := range options {
		verifyOptions(rep, filepath.Join(dir, n))
	}
	current := filepath.Base(desc.ManifestFilename)
	for _, n := range manifests {
		verifyManifestFraming(rep, filepath.Join(dir, n), n != current)
	}
	live, liveWALs, liveOK := liveTables(rep, dir, lock, filepath.Join(dir, current))
	for _, n := range ssts {
		p := filepath.Join(dir, n)
		rep.Checked[KindSSTable]++
		if _, err := VerifySST(p); err != nil {
			rep.Damage(KindSSTable, p, "%v", err)
			continue
		}
		num, _ := strconv.ParseUint(strings.TrimSuffix(n, ".sst"), 10, 64)
		size, ok := live[num]
		if !liveOK {
			continue
		}
		if !ok {
			rep.Note(KindSSTable, p, "not referenced by the MANIFEST (left by an interrupted flush, compaction or ingest; Pebble deletes it at the next open)")
			continue
		}
		if st, err := os.Stat(p); err == nil && size >= 0 && st.Size() != size {
			rep.Damage(KindSSTable, p, "is %d bytes, the MANIFEST says %d", st.Size(), size)
		}
	}
	if err := verifyWALs(rep, dir, liveWALs); err != nil {
		return nil, err
	}
	return rep, nil
}

var sstName = regexp.MustCompile(`^[0-9]+\.sst$`)

// readerOptions are the options for reading ebbtable's SSTables outside a
// database: its comparer and Pebble's default key schemas for it.
func readerOptions() sstable.ReaderOptions {
	return verifyPebbleOptions().MakeReaderOptions()
}

func verifyPebbleOptions() *pebble.Options {
	o := &pebble.Options{Comparer: Comparer, FormatMajorVersion: pebble.FormatNewest}
	o.EnsureDefaults()
	return o
}

// VerifySST checks an SSTable file written by ebbtable (in the database or
// in a backup): every block's checksum, then every point key in order. It
// returns the number of point keys.
func VerifySST(path string) (keys int64, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("reading the table panicked: %v", p)
		}
	}()
	f, err := vfs.Default.Open(path)
	if err != nil {
		return 0, err
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		f.Close()
		return 0, err
	}
	r, err := sstable.NewReader(context.Background(), readable, readerOptions())
	if err != nil {
		readable.Close()
		return 0, fmt.Errorf("unreadable table: %w", err)
	}
	defer r.Close()
	if err := r.ValidateBlockChecksums(); err != nil {
		// The reader knows no file number; drop its placeholder.
		return 0, fmt.Errorf("block checksum: %s", strings.ReplaceAll(err.Error(), "file 000000: ", ""))
	}
	it, err := r.NewIter(sstable.NoTransforms, nil, nil, sstable.AssertNoBlobHandles)
	if err != nil {
		return 0, err
	}
	defer it.Close()
	var prev []byte
	for kv := it.First(); kv != nil; kv = it.Next() {
		if prev != nil && Comparer.Compare(prev, kv.K.UserKey) > 0 {
			return keys, fmt.Errorf("keys out of order after %d keys", keys)
		}
		prev = append(prev[:0], kv.K.UserKey...)
		if _, _, err := kv.Value(nil); err != nil {
			return keys, err
		}
		keys++
	}
	if err := it.Error(); err != nil {
		return keys, err
	}
	return keys, nil
}

// verifyOptions checks that an OPTIONS file parses and names ebbtable's
// comparer. (The file has no checksum: a flip inside a value can pass.)
func verifyOptions(rep *Report, path string) {
	rep.Checked[KindOptions]++
	b, err := os.ReadFile(path)
	if err != nil {
		rep.Damage(KindOptions, path, "%v", err)
		return
	}
	o := verifyPebbleOptions()
	if err := o.CheckCompatibility(filepath.Dir(path), string(b)); err != nil {
		rep.Damage(KindOptions, path, "%v", err)
		return
	}
	var parsed pebble.Options
	hooks := &pebble.ParseHooks{
		NewComparer: func(name string) (*pebble.Comparer, error) {
			if name != Comparer.Name {
				return nil, fmt.Errorf("unknown comparer %q", name)
			}
			return Comparer, nil
		},
	}
	if err := parsed.Parse(string(b), hooks); err != nil {
		rep.Damage(KindOptions, path, "%v", err)
	}
}

// Record framing (Pebble's record package; the MANIFEST uses the legacy
// chunk header: checksum uint32, length uint16, type byte).
const (
	recordBlockSize   = 32 << 10
	legacyHeaderSize  = 7
	chunkFull         = 1
	chunkLast         = 4
	crcMaskDelta      = 0xa282ead8
	maxLegacyChunkTyp = 4
	// The WAL-sync chunk format adds the log number (uint32) and the
	// offset the log was synced to when the chunk was written (uint64).
	walSyncHeaderSize    = 19
	walSyncFullChunk     = 9
	walSyncLastChunk     = 12
	recyclableHeaderSize = 11
	recyclableFullChunk  = 5
	recyclableLastChunk  = 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + crcMaskDelta
}

// verifyManifestFraming reads every record of a MANIFEST. A record cut off
// by the end of the file (an edit a crash interrupted; Pebble ignores it) is
// a note; a record whose checksum fails is damage.
func verifyManifestFraming(rep *Report, path string, previous bool) {
	rep.Checked[KindManifest]++
	b, err := os.ReadFile(path)
	if err != nil {
		rep.Damage(KindManifest, path, "%v", err)
		return
	}
	which := ""
	if previous {
		which = " (an earlier MANIFEST Pebble keeps; not in use)"
	}
	rr := record.NewReader(strings.NewReader(string(b)), 0)
	n := 0
	for {
		off := rr.Offset()
		r, err := rr.Next()
		if err == io.EOF {
			return
		}
		if err == nil {
			_, err = io.Copy(io.Discard, r)
		}
		if err != nil {
			if legacyTornAt(b, off) {
				rep.Note(KindManifest, path, "ends in an incomplete record at offset %d after %d good records (an edit a crash cut short; Pebble ignores it)%s", off, n, which)
				return
			}
			rep.Damage(KindManifest, path, "bad record at offset %d after %d good records: %v%s", off, n, err, which)
			return
		}
		n++
	}
}

// legacyTornAt reports whether the record starting at off in a legacy-format
// log is cut off by the end of the file with every chunk before the cut
// intact: a torn tail rather than corruption.
func legacyTornAt(b []byte, off int64) bool {
	pos := int(off)
	for {
		blockEnd := (pos/recordBlockSize + 1) * recordBlockSize
		if blockEnd-pos < legacyHeaderSize {
			// Trailing bytes of a block too short for a header are padding.
			if blockEnd >= len(b) {
				return true
			}
			pos = blockEnd
			continue
		}
		if pos+legacyHeaderSize > len(b) {
			return true
		}
		h := b[pos:]
		sum, length, typ := binary.LittleEndian.Uint32(h), int(binary.LittleEndian.Uint16(h[4:])), h[6]
		if typ == 0 || typ > maxLegacyChunkTyp {
			return false
		}
		end := pos + legacyHeaderSize + length
		if end > blockEnd {
			return false
		}
		if end > len(b) {
			return true
		}
		if maskedCRC(b[pos+6:end]) != sum {
			return false
		}
		if typ == chunkFull || typ == chunkLast {
			return false
		}
		pos = end
	}
}

// verifyLogger drops Pebble's chatter; a fatal error panics, and the
// read-only open that could meet one recovers it as damage.
type verifyLogger struct{}

func (verifyLogger) Infof(string, ...interface{})  {}
func (verifyLogger) Errorf(string, ...interface{}) {}
func (verifyLogger) Fatalf(f string, a ...interface{}) {
	panic(fmt.Sprintf("pebble: "+f, a...))
}

// emptyWALs is a filesystem that does not list OPTIONS files and opens every
// WAL as an empty file, so a read-only open decodes the MANIFEST without
// reading the options or replaying a WAL (both checked apart). It records
// the WALs the open would have replayed: those from the MANIFEST's oldest
// unflushed log on. An older WAL is obsolete (its writes are in SSTables):
// Pebble never reads it again and deletes it at the next open.
type emptyWALs struct {
	vfs.FS
	mu       sync.Mutex
	replayed map[string]bool // base names
}

func (h *emptyWALs) List(dir string) ([]string, error) {
	names, err := h.FS.List(dir)
	out := names[:0]
	for _, n := range names {
		if !strings.HasPrefix(n, "OPTIONS-") {
			out = append(out, n)
		}
	}
	return out, err
}

func (h *emptyWALs) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	base := h.FS.PathBase(name)
	if _, _, ok := wal.ParseLogFilename(base); !ok {
		return h.FS.Open(name, opts...)
	}
	h.mu.Lock()
	h.replayed[base] = true
	h.mu.Unlock()
	mem := vfs.NewMem()
	f, err := mem.Create("empty.log", vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, err
	}
	f.Close()
	return mem.Open("empty.log")
}

// liveTables opens the database read-only (Pebble decodes every version
// edit of the MANIFEST) and returns the size of each SSTable the current
// version references, by file number (-1 for a virtual table's backing),
// and the base names of the WALs Pebble would replay. Problems are damage
// to the MANIFEST; ok is false when it could not be read.
func liveTables(rep *Report, dir string, lock *pebble.Lock, manifest string) (live map[uint64]int64, liveWALs map[string]bool, ok bool) {
	defer func() {
		if p := recover(); p != nil {
			rep.Damage(KindManifest, manifest, "decoding it panicked: %v", p)
			ok = false
		}
	}()
	o := verifyPebbleOptions()
	fs := &emptyWALs{FS: vfs.Default, replayed: map[string]bool{}}
	o.FS = fs
	o.ReadOnly = true
	o.Lock = lock
	o.DisableConsistencyCheck = true
	o.DisableTableStats = true
	o.Logger = verifyLogger{}
	o.Cache = pebble.NewCache(1 << 20)
	defer o.Cache.Unref()
	// A database on shared storage references objects verify cannot
	// reach: Pebble is told they exist somewhere, and they are counted,
	// not checked (liveness of the local files is what verify judges).
	o.Experimental.RemoteStorage = unreachableFactory{}
	db, err := pebble.Open(dir, o)
	if err != nil {
		rep.Damage(KindManifest, manifest, "cannot be loaded: %v", err)
		return nil, nil, false
	}
	defer db.Close()
	levels, err := db.SSTables()
	if err != nil {
		rep.Damage(KindManifest, manifest, "references an SSTable that is missing: %v", err)
		return nil, nil, false
	}
	live = map[uint64]int64{}
	shared := 0
	for _, level := range levels {
		for _, t := range level {
			if t.BackingType != pebble.BackingTypeLocal {
				shared++
				continue
			}
			num := uint64(t.BackingSSTNum)
			if t.Virtual {
				if _, seen := live[num]; !seen {
					live[num] = -1
				}
				continue
			}
			live[num] = int64(t.Size)
		}
	}
	if shared > 0 {
		rep.Note(KindManifest, manifest, "references %d SSTables in shared storage, which verify does not check", shared)
	}
	for num := range live {
		p := filepath.Join(dir, fmt.Sprintf("%06d.sst", num))
		if _, err := os.Stat(p); err != nil {
			rep.Damage(KindManifest, manifest, "references %s, which is missing: %v", filepath.Base(p), err)
		}
	}
	return live, fs.replayed, true
}

// verifyWALs reads every record of every WAL Pebble would replay (all of
// them when live is nil: the MANIFEST could not be read) and decodes it as
// a batch. An older WAL is obsolete and only noted: Pebble never reads it.
// One an open replayed and flushed, with the process killed before Pebble
// deleted it, ends in zeros without its EOF trailer (walzero.go), which in
// a WAL Pebble replays would be damage.
func verifyWALs(rep *Report, dir string, live map[string]bool) error {
	logs, err := wal.Scan(wal.Dir{FS: vfs.Default, Dirname: dir})
	if err != nil {
		return fmt.Errorf("ebbtable: verify %s: %w", dir, err)
	}
	sort.Slice(logs, func(i, j int) bool { return logs[i].Num < logs[j].Num })
	for i, ll := range logs {
		newest := i == len(logs)-1
		rep.Checked[KindWAL]++
		_, p := ll.SegmentLocation(ll.NumSegments() - 1)
		if live != nil && !live[filepath.Base(p)] {
			rep.Note(KindWAL, p, "obsolete: older than the MANIFEST's oldest unflushed log, so its writes are in SSTables; Pebble does not read it and deletes it at the next open")
			continue
		}
		verifyWAL(rep, ll, p, newest)
	}
	return nil
}

func verifyWAL(rep *Report, ll wal.LogicalLog, path string, newest bool) {
	defer func() {
		if p := recover(); p != nil {
			rep.Damage(KindWAL, path, "reading it panicked: %v", p)
		}
	}()
	r := ll.OpenForRead()
	defer r.Close()
	n := 0
	var buf []byte
	for {
		rec, off, err := r.NextRecord()
		if err == nil {
			buf, err = readAllInto(buf[:0], rec)
		}
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			if newest && errors.Is(err, record.ErrUnexpectedEOF) {
				b, rerr := os.ReadFile(path)
				if rerr != nil {
					rep.Damage(KindWAL, path, "%v", rerr)
					return
				}
				size := int64(len(b))
				if zeroTail(b, off.Physical) {
					return // the log's end, then the zeros written ahead of it (walzero.go)
				}
				if at, synced, ok := intactChunkAfter(b, uint32(ll.Num), off.Physical); ok {
					why := fmt.Sprintf("an intact record of this log follows at offset %d (a crash tears only the end of a log)", at)
					if synced > off.Physical {
						why = fmt.Sprintf("a later record (at offset %d) says the log was synced to offset %d", at, synced)
					}
					rep.Damage(KindWAL, path, "bad record at offset %d after %d good records: %s, so this is corruption, not a torn tail; Pebble may take it for the end of the log and drop every record after it",
						off.Physical, n, why)
					return
				}
				rep.Note(KindWAL, path, "torn tail: %d complete records, then %d bytes from offset %d that end mid-record (a write cut short by a crash or power loss; it was never acknowledged as synced and Pebble ignores it)",
					n, size-off.Physical, off.Physical)
				return
			}
			rep.Damage(KindWAL, path, "bad record at offset %d after %d good records: %v", off.Physical, n, err)
			return
		}
		if err := checkBatch(buf); err != nil {
			rep.Damage(KindWAL, path, "record at offset %d does not decode as a batch: %v", off.Physical, err)
			return
		}
		n++
	}
}

// intactChunkAfter looks past offset from in a WAL (log number logNum) for
// an intact chunk of the same log: a torn write leaves nothing intact after
// the tear, so one is evidence of corruption. synced is the offset the log
// was synced to when that chunk was written (Pebble's WAL-sync chunk
// format; 0 in the older recyclable format): beyond from, it proves the
// bad record had been synced. It returns a chunk with such proof if there
// is one, else the first intact chunk.
func intactChunkAfter(b []byte, logNum uint32, from int64) (at, synced int64, ok bool) {
	for p := int(from) + 1; p+recyclableHeaderSize <= len(b); p++ {
		blockEnd := (p/recordBlockSize + 1) * recordBlockSize
		typ := b[p+6]
		hdr := recyclableHeaderSize
		if typ >= walSyncFullChunk && typ <= walSyncLastChunk {
			hdr = walSyncHeaderSize
		} else if typ < recyclableFullChunk || typ > recyclableLastChunk {
			continue
		}
		if p+hdr > blockEnd || p+hdr > len(b) || binary.LittleEndian.Uint32(b[p+7:]) != logNum {
			continue
		}
		end := p + hdr + int(binary.LittleEndian.Uint16(b[p+4:]))
		if end > blockEnd || end > len(b) || maskedCRC(b[p+6:end]) != binary.LittleEndian.Uint32(b[p:]) {
			continue
		}
		var s int64
		if hdr == walSyncHeaderSize {
			s = int64(binary.LittleEndian.Uint64(b[p+11:]))
		}
		if s > from {
			return int64(p), s, true // proof: look no further
		}
		if !ok {
			at, synced, ok = int64(p), s, true
		}
	}
	return at, synced, ok
}

// zeroTail says whether the WAL b holds only zeros from offset from on, as
// a new WAL does past its last write (walZeroAhead): Pebble's reader takes
// them for an unclean end, but nothing was cut short there.
func zeroTail(b []byte, from int64) bool {
	if from < 0 || from > int64(len(b)) {
		return false
	}
	for _, c := range b[from:] {
		if c != 0 {
			return false
		}
	}
	return true
}

func readAllInto(dst []byte, r io.Reader) ([]byte, error) {
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

// checkBatch decodes a WAL record as a Pebble batch: its header and as many
// entries as the header counts.
func checkBatch(b []byte) error {
	h, ok := batchrepr.ReadHeader(b)
	if !ok {
		return fmt.Errorf("%d bytes, shorter than a batch header", len(b))
	}
	r := batchrepr.Read(b)
	var n uint32
	for {
		_, _, _, ok, err := r.Next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		n++
	}
	if n != h.Count {
		return fmt.Errorf("batch header counts %d entries, it holds %d", h.Count, n)
	}
	return nil
}

// CheckOnOpen refuses, before Pebble opens dir, damage Pebble would
// silently step over: a bad record in the current MANIFEST (Pebble stops
// reading at it and opens an older version of the database, with later
// files forgotten), and a bad record in the newest WAL that a later record
// proves was synced (Pebble, reading ahead only in later 32 KiB blocks,
// can take it for a torn tail and drop every record after it). A torn tail
// of either, which a crash leaves, passes.
func CheckOnOpen(dir string) (notes []string, err error) {
	fs := vfs.Default
	desc, err := pebble.Peek(dir, fs)
	if err != nil || !desc.Exists {
		return nil, nil // Pebble reports what it cannot read itself
	}
	rep := NewReport()
	verifyManifestFraming(rep, desc.ManifestFilename, false)
	logs, err := wal.Scan(wal.Dir{FS: fs, Dirname: dir})
	if err == nil && len(logs) > 0 {
		sort.Slice(logs, func(i, j int) bool { return logs[i].Num < logs[j].Num })
		ll := logs[len(logs)-1]
		_, p := ll.SegmentLocation(ll.NumSegments() - 1)
		verifyWALSynced(rep, ll, p)
	}
	for _, f := range rep.Findings {
		if !f.Damaged {
			notes = append(notes, f.String())
			continue
		}
		{
			return notes, fmt.Errorf("ebbtable: the database in %s is damaged: %s: %s (Pebble would open past it and silently lose data). Run 'ebbtable verify --data %s' to see which files; restore from a backup, or move the directory aside and start afresh", dir, f.Path, f.Problem, dir)
		}
	}
	return notes, nil
}

// verifyWALSynced reads a WAL's records and reports damage only when the
// log proves the bad record was synced.
func verifyWALSynced(rep *Report, ll wal.LogicalLog, path string) {
	r := ll.OpenForRead()
	defer r.Close()
	for n := 0; ; n++ {
		rec, off, err := r.NextRecord()
		if err == nil {
			_, err = io.Copy(io.Discard, rec)
		}
		if err == nil {
			continue
		}
		if errors.Is(err, io.EOF) {
			return // a clean end
		}
		if errors.Is(err, record.ErrUnexpectedEOF) {
			b, rerr := os.ReadFile(path)
			if rerr != nil {
				return
			}
			if zeroTail(b, off.Physical) {
				return // a clean end: the zeros written ahead of the log (walzero.go)
			}
			if at, synced, ok := intactChunkAfter(b, uint32(ll.Num), off.Physical); ok && synced > off.Physical {
				rep.Damage(KindWAL, path, "bad record at offset %d after %d good records, though a later record (at offset %d) says the log was synced to offset %d", off.Physical, n, at, synced)
				return
			}
		}
		// Pebble's replay stops here too, without a word: say so.
		rep.Note(KindWAL, path, "torn tail at offset %d after %d good records (%v): the end of a write a crash or power loss cut short; it was never acknowledged, and it is dropped", off.Physical, n, err)
		return
	}
}

// unreachableFactory stands for a shared store verify has no access to.
type unreachableFactory struct{}

func (unreachableFactory) CreateStorage(remote.Locator) (remote.Storage, error) {
	return unreachableStore{}, nil
}

var errUnreachable = errors.New("ebbtable: verify reads no shared storage")

type unreachableStore struct{}

func (unreachableStore) Close() error { return nil }
func (unreachableStore) ReadObject(context.Context, string) (remote.ObjectReader, int64, error) {
	return nil, 0, errUnreachable
}
func (unreachableStore) CreateObject(string) (io.WriteCloser, error) { return nil, errUnreachable }
func (unreachableStore) List(string, string) ([]string, error)       { return nil, errUnreachable }
func (unreachableStore) Delete(string) error                         { return errUnreachable }
func (unreachableStore) Size(string) (int64, error)                  { return 0, errUnreachable }
func (unreachableStore) IsNotExistError(error) bool                  { return false }
