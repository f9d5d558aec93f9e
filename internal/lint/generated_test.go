package lint

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// protocVersion matches the generated files' protoc version lines, the one
// part that may differ between machines.
var protocVersion = regexp.MustCompile(`(?m)^// (\t|- )protoc +v[0-9.]+$`)

// generated lists each .proto in proto/ with the package its Go code is
// generated into (by `go generate` in that package) and the files' base name.
var generated = []struct{ proto, pkg, base string }{
	{"ebbtable/admin/v1/admin.proto", "server/ebbadminpb", "admin"},
	{"ebbtable/cluster/v1/cluster.proto", "server/clusterpb", "cluster"},
}

// TestGeneratedCurrent regenerates the Go code of every .proto with the
// generators pinned in go.mod (as `tool`s) and fails when a checked-in
// file differs: edit the .proto, then run `go generate ./<package>`. It
// skips only where protoc is not installed (CI installs it).
func TestGeneratedCurrent(t *testing.T) {
	t.Parallel()
	protoc, err := exec.LookPath("protoc")
	if err != nil {
		t.Skip("protoc is not installed (apt-get install protobuf-compiler)")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	plugin := func(name string) string {
		out, err := exec.Command("go", "tool", "-n", name).Output()
		if err != nil {
			t.Fatalf("go tool -n %s: %v", name, err)
		}
		return string(bytes.TrimSpace(out))
	}
	goPlugin, grpcPlugin := plugin("protoc-gen-go"), plugin("protoc-gen-go-grpc")
	for _, g := range generated {
		out := t.TempDir()
		cmd := exec.Command(protoc,
			"--plugin=protoc-gen-go="+goPlugin,
			"--plugin=protoc-gen-go-grpc="+grpcPlugin,
			"--go_out="+out, "--go_opt=module="+module,
			"--go-grpc_out="+out, "--go-grpc_opt=module="+module,
			"-I", "proto", filepath.Join("proto", g.proto))
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("protoc %s: %v\n%s", g.proto, err, b)
		}
		for _, name := range []string{g.base + ".pb.go", g.base + "_grpc.pb.go"} {
			want, err := os.ReadFile(filepath.Join(out, g.pkg, name))
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(root, g.pkg, name))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(protocVersion.ReplaceAll(got, nil), protocVersion.ReplaceAll(want, nil)) {
				t.Errorf("%s/%s is stale: run go generate ./%s", g.pkg, name, g.pkg)
			}
		}
	}
}
