// Command ebbtable runs an ebbtable server or talks to one; see package cli.
package main

import (
	"os"

	"github.com/ebbtable/ebbtable/cli"
	"github.com/ebbtable/ebbtable/internal/hugepages"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		// Pebble's memtables on huge pages (docs/performance.md).
		hugepages.Reexec()
	}
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
