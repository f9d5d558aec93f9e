package server

import (
	"context"
	"errors"
	"strings"
	"time"

	"cloud.google.com/go/iam/apiv1/iampb"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// IAM policies of cluster-wide resources (docs/security.md, "IAM
// policies"; docs/scale-out.md, "Backups"): in cluster mode a backup's
// policy is kept in etcd (iam/NAME), where every node reads, enforces and
// changes the same one, as its record is; other resources' policies stay
// in each node's own metadata.

// iamTimeout bounds an etcd read or write of a policy.
const iamTimeout = 10 * time.Second

// clusterIAM reports whether resource's policy is kept in etcd.
func (s *Server) clusterIAM(resource string) bool {
	return s.cluster != nil && strings.Contains(resource, "/backups/")
}

// readIAM returns resource's policy and the revision to compare when it
// is replaced (etcd's in cluster mode; 0 otherwise).
func (s *Server) readIAM(resource string) (*iampb.Policy, int64, error) {
	if !s.clusterIAM(resource) {
		p, err := s.IAMPolicy(resource)
		return p, 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), iamTimeout)
	defer cancel()
	v, rev, err := s.cluster.m.GetIAMPolicy(ctx, resource)
	if err != nil {
		return nil, 0, status.Errorf(codes.Unavailable, "%v", err)
	}
	p := &iampb.Policy{}
	if err := proto.Unmarshal(v, p); err != nil {
		return nil, 0, status.Errorf(codes.DataLoss, "ebbtable: the IAM policy of %s in etcd: %v", resource, err)
	}
	return p, rev, nil
}

// storeIAM stores resource's encoded policy, read at rev (ABORTED if it
// changed since, through another node).
func (s *Server) storeIAM(resource string, v []byte, rev int64) error {
	if !s.clusterIAM(resource) {
		inst, rest, err := iamKey(resource)
		if err != nil {
			return err
		}
		return s.putMeta(kindIAM, inst, rest, v) // stamped: it travels to peer clusters (metarepl.go)
	}
	ctx, cancel := context.WithTimeout(context.Background(), iamTimeout)
	defer cancel()
	err := s.cluster.m.PutIAMPolicy(ctx, resource, v, rev)
	if errors.Is(err, clusteretcd.ErrRecordChanged) {
		return status.Errorf(codes.Aborted, "ebbtable: the policy of %s changed since it was read (through another node); read it again and retry", resource)
	}
	if err != nil {
		return status.Errorf(codes.Unavailable, "%v", err)
	}
	return nil
}

// forgetClusterIAM drops a deleted cluster backup's policy.
func (s *Server) forgetClusterIAM(resource string) error {
	ctx, cancel := context.WithTimeout(context.Background(), iamTimeout)
	defer cancel()
	if err := s.cluster.m.DeleteIAMPolicy(ctx, resource); err != nil {
		return status.Errorf(codes.Unavailable, "%v", err)
	}
	return nil
}

// checkClusterBackup answers NotFound for a cluster backup with no record.
func (s *Server) checkClusterBackup(resource string) error {
	n, err := parseBackup(resource)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), iamTimeout)
	defer cancel()
	_, _, _, err = s.cluster.readBackup(ctx, n)
	return err
}
