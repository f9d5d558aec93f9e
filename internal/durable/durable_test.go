package durable

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReplaceFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	for _, want := range []string{"one", "two, longer", "3"} {
		if err := ReplaceFile(p, []byte(want)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != want {
			t.Fatalf("read %q, %v; want %q", got, err, want)
		}
	}
	if _, err := os.Stat(p + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("temporary file left behind: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want 1", len(entries))
	}
}

func TestErrorsReachTheCaller(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no", "such", "dir")
	if err := ReplaceFile(filepath.Join(missing, "f"), []byte("x")); err == nil {
		t.Fatal("ReplaceFile into a missing directory succeeded")
	}
	if err := WriteFile(filepath.Join(missing, "f"), []byte("x")); err == nil {
		t.Fatal("WriteFile into a missing directory succeeded")
	}
	if err := SyncDir(missing); err == nil {
		t.Fatal("SyncDir of a missing directory succeeded")
	}
}
