// Package server owns ebbtable's gRPC surface: the Bigtable Data and Table
// Admin APIs, ebbtable's own admin service, health, and the one table that
// turns engine errors into status codes. It is the only package that imports
// gRPC; everything below it is transport-free.
package server
