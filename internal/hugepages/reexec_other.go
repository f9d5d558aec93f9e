//go:build !linux || !cgo

package hugepages

// Reexec does nothing here: glibc's malloc tunables (and the cgo build
// whose Pebble allocates through C malloc) are Linux ones.
func Reexec() {}
