// Package rowttl owns the row deletion policy model (Spanner-style TTL per
// table), both SQL dialects' DDL for it, and the row deletion job.
package rowttl
