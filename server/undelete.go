package server

import (
	"context"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/ebbtable/ebbtable/schedule"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// DefaultUndeleteRetention is how long a deleted table stays restorable
// by default: 7 days, as in Cloud Bigtable.
const DefaultUndeleteRetention = 7 * 24 * time.Hour

// UndeleteTable restores a table deleted within the undelete retention
// (serve --undelete-retention), with its data, schema and the settings,
// authorized views, schema bundles and IAM policy it had.
func (a *adminServer) UndeleteTable(ctx context.Context, req *adminpb.UndeleteTableRequest) (*longrunningpb.Operation, error) {
	ref, err := parseTable(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	start := timestamppb.New(a.s.opts.Clock.Now())
	m, err := a.s.engine.UndeleteTable(ref.instance, ref.table)
	if err != nil {
		return nil, toStatus(err)
	}
	end := timestamppb.New(a.s.opts.Clock.Now())
	return a.s.ops.done(ref.name(), a.tableToProto(m, adminpb.Table_SCHEMA_VIEW), &adminpb.UndeleteTableMetadata{Name: ref.name(), StartTime: start, EndTime: end})
}

// forgetTableMeta clears what a former table of the name left beside its
// data (settings, authorized views, schema bundles, IAM policy): a table
// created under the name starts without them. A deleted table keeps them
// until then, so UndeleteTable brings them back.
func (s *Server) forgetTableMeta(ref tableRef) error {
	if err := s.forgetTableExt(ref); err != nil {
		return err
	}
	if err := s.forgetTableBundles(ref); err != nil {
		return err
	}
	if err := s.forgetTableViews(ref); err != nil {
		return err
	}
	return s.forgetIAM(ref.name())
}

// startPurge runs the purge of deleted tables past their retention on the
// garbage collector's cadence.
func (s *Server) startPurge() *schedule.Loop {
	every := s.opts.GC.Interval
	if every <= 0 {
		every = time.Minute
	}
	return schedule.Start(schedule.Options{Name: "deleted table purge", Interval: every, MaxBackoff: time.Hour,
		Clock: s.opts.Clock, Logger: s.log}, func(context.Context) error {
		n, err := s.engine.PurgeDeletedTables()
		if n > 0 {
			s.log.Info("purged deleted tables past their undelete retention", "tables", n)
		}
		return err
	})
}
