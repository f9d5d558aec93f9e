package clusterpb

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

// TestGeneratedCurrent regenerates the code from
// proto/ebbtable/cluster/v1/cluster.proto with the generators pinned in go.mod
// and fails when the checked-in files differ: edit the .proto, then run
// `go generate ./server/clusterpb`. It skips only where protoc is not
// installed (CI installs it).
func TestGeneratedCurrent(t *testing.T) {
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
	out := t.TempDir()
	const module = "github.com/ebbtable/ebbtable"
	cmd := exec.Command(protoc,
		"--plugin=protoc-gen-go="+plugin("protoc-gen-go"),
		"--plugin=protoc-gen-go-grpc="+plugin("protoc-gen-go-grpc"),
		"--go_out="+out, "--go_opt=module="+module,
		"--go-grpc_out="+out, "--go-grpc_opt=module="+module,
		"-I", "proto", "proto/ebbtable/cluster/v1/cluster.proto")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, b)
	}
	for _, name := range []string{"cluster.pb.go", "cluster_grpc.pb.go"} {
		want, err := os.ReadFile(filepath.Join(out, "server", "clusterpb", name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(protocVersion.ReplaceAll(got, nil), protocVersion.ReplaceAll(want, nil)) {
			t.Errorf("server/clusterpb/%s is stale: run go generate ./server/clusterpb", name)
		}
	}
}
