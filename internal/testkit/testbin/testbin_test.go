package testbin

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestForgetGone: the binaries of a removed source tree go; those of a
// tree that exists, of the caller's own tree, of a tree whose build holds
// the lock, and of a directory without a "gomod" file stay.
func TestForgetGone(t *testing.T) {
	root, trees := t.TempDir(), t.TempDir()
	live := filepath.Join(trees, "go.mod")
	if err := os.WriteFile(live, []byte("module x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(trees, "removed", "go.mod")
	mk := func(name, mod string) string {
		d := filepath.Join(root, name)
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		for f, b := range map[string]string{"lock": "", "ebbtable": "binary"} {
			if err := os.WriteFile(filepath.Join(d, f), []byte(b), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if mod != "" {
			if err := os.WriteFile(filepath.Join(d, "gomod"), []byte(mod), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	removed := mk("removed", gone)
	kept := mk("live", live)
	self := mk("self", gone)
	busy := mk("busy", gone)
	old := mk("old", "")
	lock, err := os.OpenFile(filepath.Join(busy, "lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	forgetGone(root, self)

	for d, want := range map[string]bool{removed: false, kept: true, self: true, busy: true, old: true} {
		_, err := os.Stat(filepath.Join(d, "ebbtable"))
		if got := err == nil; got != want {
			t.Errorf("%s: binary kept %v, want %v (%v)", filepath.Base(d), got, want, err)
		}
	}
}
