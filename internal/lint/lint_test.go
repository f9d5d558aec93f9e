package lint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/ebbtable/ebbtable"

// upper lists the top-level directories that may speak gRPC or HTTP: the
// transports, the commands and the test-only harnesses. Every other package
// is below the server and must not. objstore is a transport too: its S3
// adapter speaks HTTP (minio-go); the commands hand the store it opens to
// the engine as a storage.ObjectStore, so nothing below imports it.
var upper = map[string]bool{
	"server": true, "cli": true, "cmd": true, "console": true, "auth": true,
	"compat": true, "robustness": true, "bench": true, "examples": true,
	// internal packages are layered one by one (layerOf): the test kits
	// and this lint sit above, internal/durable (crash-safe small files)
	// below.
	"internal/testkit": true, "internal/etcdtest": true, "internal/lint": true,
	"clusteretcd": true, // the etcd client speaks gRPC: a transport
	"objstore":    true,
}

// layerOf is the layer a module path (of a file or a package) is in: its
// top directory, or internal/<name> for an internal package.
func layerOf(rel string) string {
	parts := strings.Split(rel, "/")
	if parts[0] == "internal" && len(parts) > 2 {
		return parts[0] + "/" + parts[1]
	}
	if parts[0] == "internal" && len(parts) == 2 && !strings.HasSuffix(parts[1], ".go") {
		return rel
	}
	return parts[0]
}

// pebbleHomes may import Pebble, in their tests too: everything else goes
// through the engine's verbs (issue 19 sealed it).
var pebbleHomes = map[string]bool{"storage": true, "table": true}

// sleepers are the test files allowed to call time.Sleep: each waits on a
// real process, a real disk or a peer on the real clock. New tests wait on
// the injected clock or testkit polling instead; the list may only shrink.
var sleepers = map[string]bool{
	"backup/backup_test.go":                true,
	"cli/cbt_test.go":                      true,
	"cli/changestream_test.go":             true,
	"cli/rowttl_test.go":                   true,
	"cli/ttl_test.go":                      true,
	"collector/bench_test.go":              true,
	"collector/collector_test.go":          true,
	"robustness/bounds_test.go":            true, // the canary paces its reads
	"robustness/diskfault_harness_test.go": true,
	"robustness/diskfault_test.go":         true,
	"robustness/killnine_test.go":          true,
	"robustness/lin_test.go":               true,
	"robustness/main_test.go":              true,
	"robustness/threeclusters_test.go":     true,
	"rowttl/bench_test.go":                 true,
	"rowttl/job_test.go":                   true,
	"schedule/schedule_test.go":            true,
	"server/backup_test.go":                true,
	"server/e2e/gcspace_test.go":           true,
	"server/replication_bench_test.go":     true,
	"table/changestream_test.go":           true,
	"table/durable_test.go":                true,
	"table/walfault_test.go":               true,
}

// file is one parsed Go file of the module.
type file struct {
	rel  string // slash path from the module root
	dir  string // slash directory from the module root
	top  string // first path element
	test bool
	ast  *ast.File
}

// parsed is the module, parsed once for all the checks (they only read it).
var parsed struct {
	sync.Once
	files []file
	err   error
}

func parseModule(t *testing.T) []file {
	t.Helper()
	parsed.Do(func() { parsed.files, parsed.err = loadModule() })
	if parsed.err != nil {
		t.Fatal(parsed.err)
	}
	return parsed.files
}

func loadModule() ([]file, error) {
	root, err := filepath.Abs("../..")
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return nil, fmt.Errorf("module root not found: %v", err)
	}
	var files []file
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "ebbtable-data") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		dir := filepath.ToSlash(filepath.Dir(rel))
		files = append(files, file{rel: rel, dir: dir, top: layerOf(rel), test: strings.HasSuffix(name, "_test.go"), ast: f})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(files) < 50 {
		return nil, fmt.Errorf("found only %d Go files under %s", len(files), root)
	}
	return files, nil
}

// TestLayers keeps the architecture's walls: nothing below the server
// imports gRPC or net/http, and Pebble stays inside storage and table.
func TestLayers(t *testing.T) {
	for _, f := range parseModule(t) {
		for _, imp := range f.ast.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			below := !upper[f.top]
			if below && !f.test && (strings.HasPrefix(path, "google.golang.org/grpc") || path == "net/http" || strings.HasPrefix(path, "net/http/")) {
				t.Errorf("%s imports %s: nothing below the server speaks gRPC or HTTP", f.rel, path)
			}
			if below && !f.test && strings.HasPrefix(path, module+"/") && upper[layerOf(strings.TrimPrefix(path, module+"/"))] {
				t.Errorf("%s imports %s: nothing below the server imports a transport", f.rel, path)
			}
			if strings.HasPrefix(path, "github.com/cockroachdb/pebble") && !pebbleHomes[f.top] {
				t.Errorf("%s imports %s: Pebble stays inside storage and table", f.rel, path)
			}
		}
	}
}

// TestNoGRPCBelowServer checks the same wall transitively: a package below
// the server must not pull gRPC in through another package.
func TestNoGRPCBelowServer(t *testing.T) {
	dirs := map[string]bool{}
	for _, f := range parseModule(t) {
		if !f.test && !upper[f.top] && f.dir != "." {
			dirs[f.dir] = true
		}
	}
	var pkgs []string
	for d := range dirs {
		pkgs = append(pkgs, module+"/"+d)
	}
	sort.Strings(pkgs)
	args := append([]string{"list", "-f", `{{.ImportPath}} {{join .Deps " "}}`}, pkgs...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		for _, dep := range fields[1:] {
			if strings.HasPrefix(dep, "google.golang.org/grpc") {
				t.Errorf("package %s depends on %s", fields[0], dep)
				break
			}
		}
	}
}

// TestPackagesAreDocumented requires a package doc comment on every package
// of the module: what it owns, for the reader who opens it first.
func TestPackagesAreDocumented(t *testing.T) {
	documented := map[string]bool{}
	seen := map[string]bool{}
	for _, f := range parseModule(t) {
		if f.test {
			continue
		}
		seen[f.dir] = true
		if f.ast.Doc != nil && strings.TrimSpace(f.ast.Doc.Text()) != "" {
			documented[f.dir] = true
		}
	}
	for dir := range seen {
		if !documented[dir] {
			t.Errorf("package %s has no doc comment", dir)
		}
	}
}

// TestLoggingIsInjected forbids slog's package-level logging outside main
// packages: libraries log through the *slog.Logger they are given.
func TestLoggingIsInjected(t *testing.T) {
	calls := map[string]bool{"Debug": true, "Info": true, "Warn": true, "Error": true, "Log": true, "LogAttrs": true,
		"DebugContext": true, "InfoContext": true, "WarnContext": true, "ErrorContext": true}
	for _, f := range parseModule(t) {
		if f.test || f.ast.Name.Name == "main" {
			continue
		}
		ast.Inspect(f.ast, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "slog" && calls[sel.Sel.Name] {
				t.Errorf("%s calls slog.%s: log through an injected *slog.Logger", f.rel, sel.Sel.Name)
			}
			return true
		})
	}
}

// TestTestsDoNotSleep keeps tests on the injected clock and on polling
// helpers: only the files in sleepers may call time.Sleep.
func TestTestsDoNotSleep(t *testing.T) {
	sleeping := map[string]bool{}
	for _, f := range parseModule(t) {
		if !f.test {
			continue
		}
		ast.Inspect(f.ast, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if ok && sel.Sel.Name == "Sleep" {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "time" {
					sleeping[f.rel] = true
				}
			}
			return true
		})
	}
	for rel := range sleeping {
		if !sleepers[rel] {
			t.Errorf("%s calls time.Sleep: wait on the injected clock or poll instead", rel)
		}
	}
	for rel := range sleepers {
		if !sleeping[rel] {
			t.Errorf("%s no longer sleeps: take it off the allow-list", rel)
		}
	}
}

// TestNoLargeOrBinaryFiles keeps built binaries, data directories and other
// large files out of the repository: one session's whole submission was
// refused for its size. Every tracked file stays under 1 MiB and none is
// an executable.
func TestNoLargeOrBinaryFiles(t *testing.T) {
	out, err := exec.Command("git", "-C", "../..", "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		path := filepath.Join("../..", rel)
		fi, err := os.Stat(path)
		if err != nil {
			continue // deleted in the work tree
		}
		if fi.Size() > 1<<20 {
			t.Errorf("%s is %d bytes: keep files under 1 MiB out of the repository", rel, fi.Size())
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, 4)
		n, _ := f.Read(head)
		f.Close()
		if n == 4 && string(head) == "\x7fELF" {
			t.Errorf("%s is an executable: build into a temporary directory", rel)
		}
	}
}
