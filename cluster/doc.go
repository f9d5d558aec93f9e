// Package cluster owns the scale-out policy of a cluster of ebbtable nodes,
// pure and below the transports: the tablet directory (a table's ordered
// tablets [start, end) and their owner nodes), splits, merges and moves of
// tablets, placement and drain plans, and the lease fence a node consults
// before it serves a tablet, on the injected clock. The etcd half (leases,
// transactions, watches) is package clusteretcd.
package cluster
