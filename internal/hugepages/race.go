//go:build race

package hugepages

// raceBuild: built with -race (Reexec does nothing).
const raceBuild = true
