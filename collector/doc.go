// Package collector owns garbage collection: the background loop that sweeps
// every table on a fixed cadence in bounded, paced batches, deletes what GC
// rules and cell expiries make eligible, asks Pebble to reclaim the space,
// and reports every deletion as a metric. It also answers dry runs.
package collector
