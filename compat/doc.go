// Package compat holds ebbtable's compatibility yardstick: the official Go
// client's own integration suite, run against an ebbtable server. It has no
// code of its own outside tests.
package compat
