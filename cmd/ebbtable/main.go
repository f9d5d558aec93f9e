// Command ebbtable runs an ebbtable server or talks to one; see package cli.
package main

import (
	"os"

	"github.com/ebbtable/ebbtable/cli"
)

func main() {
	withHugePages(os.Args[1:])
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
