// Package console owns ebbtable's web console: the server-rendered pages at
// / on the HTTP port (instances and tables, a table's schema and policies,
// garbage collection and row deletion at work as plots over time, a row
// browser, a live change-stream tail and dry runs), the bounded in-memory
// history of the server's own metrics the plots draw from, and the embedded
// uPlot library that draws them. It reads the engine and the background
// jobs through the narrow interfaces in source.go, and changes data only
// when Options.Writes allows it.
package console
