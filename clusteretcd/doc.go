// Package clusteretcd is the etcd half of a cluster of ebbtable nodes, a
// transport like server (the etcd client speaks gRPC): a node's membership
// under its lease, the renewals that keep the lease fence alive, the tablet
// directory in etcd with updates fenced by compare-and-swap on its mod
// revision, draining marks, and the ordered schema log every node applies
// so each node has every table under the same table id. The policy it
// stores (tablets, placement) is package cluster.
package clusteretcd
