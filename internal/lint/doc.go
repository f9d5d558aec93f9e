// Package lint holds the one test of the project's house rules a reader can
// find: the walls between layers (nothing below the server speaks gRPC or
// HTTP; Pebble stays inside storage and table), a doc comment on every
// package, logging through injected loggers, and tests that wait on the
// injected clock instead of sleeping.
package lint
