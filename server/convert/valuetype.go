package convert

import (
	"fmt"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/protobuf/proto"
)

// ValueTypeFromProto encodes a family's value type for the engine to keep
// as given, and names its aggregator when it is an aggregate type.
func ValueTypeFromProto(t *adminpb.Type) ([]byte, table.Aggregator, error) {
	if t == nil {
		return nil, table.NotAggregate, nil
	}
	b, err := proto.Marshal(t)
	if err != nil {
		return nil, "", fmt.Errorf("%w: value type: %w", table.ErrInvalid, err)
	}
	agg := t.GetAggregateType()
	if agg == nil {
		return b, table.NotAggregate, nil
	}
	if agg.GetInputType() != nil && agg.GetInputType().GetInt64Type() == nil {
		return nil, "", fmt.Errorf("%w: aggregate families take int64 input only", table.ErrInvalid)
	}
	switch {
	case agg.GetSum() != nil:
		return b, table.AggSum, nil
	case agg.GetMin() != nil:
		return b, table.AggMin, nil
	case agg.GetMax() != nil:
		return b, table.AggMax, nil
	case agg.GetHllppUniqueCount() != nil:
		return b, table.AggHLL, nil
	}
	return nil, "", fmt.Errorf("%w: aggregate type has no aggregator", table.ErrInvalid)
}

// ValueTypeToProto decodes a stored value type (nil for none).
func ValueTypeToProto(b []byte) *adminpb.Type {
	if len(b) == 0 {
		return nil
	}
	t := &adminpb.Type{}
	if err := proto.Unmarshal(b, t); err != nil {
		return nil
	}
	return t
}
