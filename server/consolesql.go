package server

import (
	"context"
	"errors"
	"fmt"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/console"
	"github.com/ebbtable/ebbtable/sqlquery"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/status"
)

// consoleSQL runs the web console's SQL page through the data API's own
// path: setupExecute plans the query as ExecuteQuery does (a query with
// proto_format, no app profile: this cluster's data), and runQuery runs
// it. Errors read as the RPC's status: "INVALID_ARGUMENT: …".
type consoleSQL struct{ d *dataServer }

func (c consoleSQL) Query(ctx context.Context, instance, query string, params []console.SQLParam) (console.SQLQuery, error) {
	req := &btpb.ExecuteQueryRequest{InstanceName: instance, Query: query,
		DataFormat: &btpb.ExecuteQueryRequest_ProtoFormat{ProtoFormat: &btpb.ProtoFormat{}}}
	for _, p := range params {
		_, v, err := ParseSQLParam(p.Type, p.Value)
		if err != nil {
			return console.SQLQuery{}, fmt.Errorf("INVALID_ARGUMENT: parameter @%s: %v", p.Name, err)
		}
		if req.Params == nil {
			req.Params = map[string]*btpb.Value{}
		}
		req.Params[p.Name] = v
	}
	x, err := c.d.setupExecute(req)
	if err != nil {
		return console.SQLQuery{}, statusText(err)
	}
	return console.SQLQuery{Columns: x.plan.Columns, Run: func(ctx context.Context, fn func([]sqlquery.Value) error) error {
		return statusText(c.d.runQuery(ctx, x, fn))
	}}, nil
}

// ParamTypes implements console.SQLRunner.
func (consoleSQL) ParamTypes() []string { return SQLParamTypes }

// statusText turns a gRPC status error into an error reading
// "CODE: message", as the RPC's client sees it.
func statusText(err error) error {
	if err == nil {
		return nil
	}
	st := status.Convert(err)
	name, ok := code.Code_name[int32(st.Code())]
	if !ok {
		name = st.Code().String()
	}
	return errors.New(name + ": " + st.Message())
}
