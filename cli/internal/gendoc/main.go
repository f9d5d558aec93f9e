// Command gendoc writes the CLI reference, docs/cli.md, from the cobra
// commands: go generate ./cli runs it.
package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/ebbtable/ebbtable/cli"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gendoc OUTPUT.md")
		os.Exit(2)
	}
	var buf bytes.Buffer
	if err := cli.WriteReference(&buf); err != nil {
		fmt.Fprintln(os.Stderr, "gendoc:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(os.Args[1], buf.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gendoc:", err)
		os.Exit(1)
	}
}
