// Package sqlquery plans and evaluates Bigtable's GoogleSQL subset (SELECT
// over one table or view, parsed by memefish) over rows read through the
// table engine exactly as ReadRows reads them.
package sqlquery
