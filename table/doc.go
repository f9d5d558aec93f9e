// Package table owns the engine's verbs on tables: create, alter and drop
// tables and families, mutate rows, read rows through filters,
// check-and-mutate and read-modify-write, all atomic per row, hiding what has
// expired. It knows nothing of gRPC; the server package translates.
package table
