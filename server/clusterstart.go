package server

import (
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A node in cluster mode listens before it joins its cluster (the others
// reach it at its address), so a call can come in while it is still
// joining (a restart: clients and nodes retry a node that was down). Until
// it has joined and caught up with the schema log, every call but health
// checks answers UNAVAILABLE, which clients and the other nodes retry;
// the cluster state is not there yet to judge it.

const notJoined = "ebbtable: this node is joining its cluster; retry"

const notJoinedInstance = "ebbtable: this cluster is copying the instance's data (--join); retry"

func (s *Server) joining(method string) bool {
	return s.cluster != nil && !s.cluster.joined.Load() && !strings.HasPrefix(method, "/grpc.health.v1.Health/")
}

// joinRefusal is the error a call gets while this node joins: its
// cluster's (--join of a cluster node) or the instance's (clientsWaitForJoin).
func (s *Server) joinRefusal(method string) error {
	if s.joining(method) {
		return status.Error(codes.Unavailable, notJoined)
	}
	if s.clientsWaitForJoin(method) { // clusterjoin.go
		return status.Error(codes.Unavailable, notJoinedInstance)
	}
	return nil
}
