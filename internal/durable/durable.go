// Package durable owns small-file writes that must survive a crash or a
// power loss: a file's bytes are synced before it is named, and the
// directory that names it is synced after. It is what the cluster member's
// node files and the backup manifests are written with.
package durable

import (
	"errors"
	"os"
	"path/filepath"
)

// WriteFile writes b to path, creating or truncating it, and syncs the
// file's contents before returning. The directory entry is not synced: use
// ReplaceFile for a file that must be found after a crash, or SyncDir the
// directory once its files are written.
func WriteFile(path string, b []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ReplaceFile replaces path with b atomically and durably: it writes and
// syncs path+".tmp", renames it over path and syncs the directory, so after
// a crash a reader finds the old contents or the new, never a mix.
func ReplaceFile(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := WriteFile(tmp, b); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// SyncDir makes a directory's entries (creations, renames, removals)
// durable.
func SyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}
