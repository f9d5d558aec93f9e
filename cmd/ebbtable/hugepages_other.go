//go:build !linux || !cgo

package main

// withHugePages does nothing here: glibc's malloc tunables (and the cgo
// build whose Pebble allocates through C malloc) are Linux ones.
func withHugePages([]string) {}
