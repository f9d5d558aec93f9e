package testbin

import "strings"

// TestBallast is the --ballast-size ServeArgs gives a test's server. The
// default (1% of the filesystem, at most 1 GiB) is fallocated at start: a
// suite's parallel subprocess servers took several GB of disk at once for
// files no test reads. Tests about the ballast pass their own size.
const TestBallast = "1MiB"

// ServeArgs returns args, a serve command line, with --ballast-size
// TestBallast added unless args already size the ballast. Other command
// lines are returned unchanged.
func ServeArgs(args []string) []string {
	if len(args) == 0 || args[0] != "serve" {
		return args
	}
	for _, a := range args[1:] {
		if a == "--" {
			break
		}
		if a == "--ballast-size" || strings.HasPrefix(a, "--ballast-size=") {
			return args
		}
	}
	out := make([]string, 0, len(args)+2)
	out = append(out, args[0], "--ballast-size", TestBallast)
	return append(out, args[1:]...)
}
