package clusteretcd

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/ebbtable/ebbtable/cluster"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TablesOwnedBy lists the tables whose live tablet directory in etcd (at
// endpoints, keys under prefix; "" is the default) names node the owner
// of a tablet, read from etcd itself, without joining: a node starting on
// an empty data directory asks it before it opens its engine
// (server/clusterfresh.go).
func TablesOwnedBy(ctx context.Context, endpoints []string, prefix, node string) ([]string, error) {
	owned, err := directoriesOwnedBy(ctx, endpoints, prefix, "tablets", node)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(owned))
	for name := range owned {
		out = append(out, name)
	}
	sort.Strings(out)
	return out, nil
}

// KeptTablesOwnedBy is TablesOwnedBy for the directories deletes kept for
// an undelete: the deleted tables an undelete would give node tablets of,
// with their table ids.
func KeptTablesOwnedBy(ctx context.Context, endpoints []string, prefix, node string) (map[string]uint64, error) {
	return directoriesOwnedBy(ctx, endpoints, prefix, "deleted", node)
}

// directoriesOwnedBy reads the directories under prefix+kind+"/" naming
// node an owner: table name to table id.
func directoriesOwnedBy(ctx context.Context, endpoints []string, prefix, kind, node string) (map[string]uint64, error) {
	o := Options{Endpoints: endpoints, Prefix: prefix}
	o.ensureDefaults()
	cli, err := clientv3.New(clientConfig(o.Endpoints, o.DialTimeout))
	if err != nil {
		return nil, fmt.Errorf("ebbtable: etcd at %v: %w", o.Endpoints, err)
	}
	defer cli.Close()
	p := o.Prefix + kind + "/"
	resp, err := cli.Get(ctx, p, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	out := map[string]uint64{}
	for _, kv := range resp.Kvs {
		name := strings.TrimPrefix(string(kv.Key), p)
		var d cluster.Directory
		if err := json.Unmarshal(kv.Value, &d); err != nil {
			return nil, fmt.Errorf("ebbtable: undecodable tablet directory in etcd at %s: %w", kv.Key, err)
		}
		for _, t := range d.Tablets {
			if t.Owner == node {
				out[name] = d.TableID
				break
			}
		}
	}
	return out, nil
}
