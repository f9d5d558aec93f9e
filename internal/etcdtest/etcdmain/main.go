// Command etcdmain runs the one-member etcd of internal/etcdtest as a
// process of its own, for the tests that start ebbtable processes against
// etcd (etcdproc.Start): their test binaries then need not link etcd's
// server. It prints the client endpoint on a line of its own and runs
// until its standard input closes, so it dies with the test that started
// it, however that one ends.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/ebbtable/ebbtable/internal/etcdtest"
)

func main() {
	dir := flag.String("dir", "", "data directory (required)")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "etcdmain: --dir is required")
		os.Exit(2)
	}
	e, err := etcdtest.Embed(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdmain:", err)
		os.Exit(1)
	}
	fmt.Println(e.Clients[0].Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin)
	e.Close()
}
