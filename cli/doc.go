// Package cli owns ebbtable's command line: the serve command and the client
// commands that talk to a server over its gRPC port.
//
// Exit codes: 0 on success, 1 when a command fails at run time (a server that
// cannot start, an RPC error), 2 on a usage error (unknown command, bad flag,
// wrong number of arguments, an invalid flag value).
package cli
