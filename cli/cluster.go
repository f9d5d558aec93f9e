package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ebbtable/ebbtable/server"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/status"
)

// Cluster mode: the serve flags that join a cluster, and the commands that
// list and move its nodes' tablets (docs/scale-out.md).

// clusterFlags are serve's cluster-mode flags.
type clusterFlags struct {
	etcd          string
	nodeID        string
	sharedStorage string
	s3Endpoint    string
	prefix        string
	leaseTTL      time.Duration
	splitSize     string
	splitInterval time.Duration
	trimEvery     int
	failover      bool
	checkpoint    time.Duration
	releaseDead   time.Duration
	backupWait    time.Duration
	restoreWait   time.Duration
}

func (f *clusterFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.etcd, "etcd", "", "cluster mode: comma-separated etcd endpoints (HOST:PORT); the node joins the cluster they hold (docs/scale-out.md)")
	fl.StringVar(&f.nodeID, "node-id", "", "cluster mode: this node's id, stable for its data directory")
	fl.StringVar(&f.sharedStorage, "shared-storage", "", "cluster mode: shared SSTable store, file:///DIR or s3://BUCKET/PREFIX (empty: every SSTable stays local)")
	fl.StringVar(&f.s3Endpoint, "s3-endpoint", "", "cluster mode: S3 endpoint for --shared-storage s3://… (default: $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL)")
	fl.StringVar(&f.prefix, "etcd-prefix", "/ebbtable/", "cluster mode: prefix of ebbtable's keys in etcd")
	fl.DurationVar(&f.leaseTTL, "lease-ttl", 10*time.Second, "cluster mode: the node's etcd lease; a node that stops renewing stops serving its tablets before it expires")
	fl.StringVar(&f.splitSize, "split-size", "0", "cluster mode: split a tablet this node owns once it grows past this size (64MiB, 1GiB; 0: only by hand)")
	fl.DurationVar(&f.splitInterval, "split-interval", 30*time.Second, "cluster mode: how often tablet sizes are checked for --split-size")
	fl.IntVar(&f.trimEvery, "schema-trim-every", server.DefaultSchemaTrimEvery, "cluster mode: after applying this many schema log entries past the last snapshot, write one and trim the log to what every node applied (-1: never)")
	fl.BoolVar(&f.failover, "failover", false, "cluster mode: automatic failover: every write goes to a commit log in --shared-storage before it is acknowledged, and a dead node's tablets are recovered by the others once its lease expires; a cluster-wide setting (the first node records it in etcd, a node started otherwise is refused)")
	fl.DurationVar(&f.checkpoint, "checkpoint-interval", 30*time.Second, "cluster mode with --failover: how often a node checkpoints its tablets (and truncates its commit log) while writes arrive")
	fl.DurationVar(&f.backupWait, "backup-part-wait", server.DefaultPartWait, "cluster mode: how long a backup through this node waits for a tablet whose owner is down (until it is back, or its tablets are taken over by --failover) or busy moving it, before the backup fails UNAVAILABLE")
	fl.DurationVar(&f.restoreWait, "restore-part-wait", server.DefaultPartWait, "cluster mode: how long a restore through this node waits for the owner of a tablet that is down or busy moving, before the restore fails (and is given up)")
	fl.DurationVar(&f.releaseDead, "release-dead-after", server.DefaultReleaseDeadAfter, "cluster mode: how long a dead node whose tablets were all taken over (with --failover), or a node that left cleanly (drained, then stopped), may come back with its data directory; then its references to shared SSTables are released (and, with --failover, its commit log and checkpoints deleted) and that directory is refused (negative: never)")
}

// options turns the flags into cluster options, nil without --etcd.
func (f *clusterFlags) options(cmd *cobra.Command) (*server.ClusterOptions, error) {
	if f.etcd == "" {
		for _, name := range []string{"node-id", "shared-storage", "s3-endpoint", "split-size", "schema-trim-every", "failover"} {
			if cmd.Flags().Changed(name) {
				return nil, usagef("--%s needs --etcd (cluster mode)", name)
			}
		}
		return nil, nil
	}
	if f.nodeID == "" {
		return nil, usagef("--etcd needs --node-id")
	}
	var eps []string
	for _, e := range strings.Split(f.etcd, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	if f.leaseTTL < time.Second {
		return nil, usagef("--lease-ttl %v must be at least 1s", f.leaseTTL)
	}
	if f.failover && f.sharedStorage == "" {
		return nil, usagef("--failover needs --shared-storage: the commit log and checkpoints live there")
	}
	if f.releaseDead == 0 {
		return nil, usagef("--release-dead-after 0: want a duration, or a negative one for never")
	}
	if f.backupWait <= 0 || f.restoreWait <= 0 {
		return nil, usagef("--backup-part-wait %v, --restore-part-wait %v: want positive durations", f.backupWait, f.restoreWait)
	}
	if f.checkpoint <= 0 {
		return nil, usagef("--checkpoint-interval %v must be positive", f.checkpoint)
	}
	split := int64(0)
	if f.splitSize != "0" {
		b, err := parseBallast(f.splitSize)
		if err != nil || b.Bytes <= 0 {
			return nil, usagef("--split-size %q: want a size such as 64MiB, or 0", f.splitSize)
		}
		split = b.Bytes
	}
	if f.trimEvery == 0 || f.trimEvery < -1 {
		return nil, usagef("--schema-trim-every %d: want a positive count, or -1 for never", f.trimEvery)
	}
	return &server.ClusterOptions{Etcd: eps, NodeID: f.nodeID, Prefix: f.prefix, LeaseTTL: f.leaseTTL,
		SharedStorage: f.sharedStorage, S3Endpoint: f.s3Endpoint, SplitBytes: split, SplitInterval: f.splitInterval,
		SchemaTrimEvery: f.trimEvery, Failover: f.failover, CheckpointInterval: f.checkpoint, ReleaseDeadAfter: f.releaseDead,
		BackupPartWait: f.backupWait, RestorePartWait: f.restoreWait}, nil
}

// withCluster runs fn with a Cluster service client of the server.
func (cf *connFlags) withCluster(cmd *cobra.Command, fn func(ctx context.Context, c clusterpb.ClusterClient) error) error {
	ctx, cancel := cf.context(cmd.Context())
	defer cancel()
	conn, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return fn(ctx, clusterpb.NewClusterClient(conn))
}

// tableName is the full resource name of a table of the command's instance.
func (cf *connFlags) tableName(table string) string {
	cf.resolve()
	return "projects/" + cf.project + "/instances/" + cf.instance + "/tables/" + table
}

func newNodesCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "nodes", Short: "The nodes of a cluster (cluster mode)", Args: cobra.NoArgs}
	var cf connFlags
	list := &cobra.Command{
		Use:   "list",
		Short: "List the cluster's nodes: live ones, and down ones that own tablets",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cf.withCluster(cmd, func(ctx context.Context, c clusterpb.ClusterClient) error {
				r, err := c.ListNodes(ctx, &clusterpb.ListNodesRequest{})
				if err != nil {
					return fmt.Errorf("list nodes on %s: %w", cf.endpoint(), err)
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NODE\tADDRESS\tSTATE\tTABLETS")
				for _, n := range r.Nodes {
					state := "live"
					switch {
					case !n.Live:
						state = "down"
					case n.Draining:
						state = "draining"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\n", n.Id, n.Addr, state, n.Tablets)
				}
				return w.Flush()
			})
		},
	}
	cf.register(cmd)
	cmd.AddCommand(list)
	return cmd
}

func newNodeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "node", Short: "Act on one node of a cluster (cluster mode)", Args: cobra.NoArgs}
	var cf connFlags
	var force bool
	drain := &cobra.Command{
		Use:   "drain NODE",
		Short: "Move every tablet off a node and mark it draining",
		Long: `Move every tablet the node owns to the least loaded other nodes (planned
moves: its data goes with them) and mark it draining, so it takes no new
tablets. A tablet that cannot move is left while the others move; the
drain then fails, listing the moves made and the tablets left with why:
run it again to go on from there. A node that is down keeps its tablets
until it comes back with its disk; --force gives them to live nodes
without their data instead, losing whatever only that node's disk held
(docs/scale-out.md, "Failure cases").`,
		Example: `  ebbtable node drain n2`,
		Args:    exactArgs(1, "a node id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return cf.withCluster(cmd, func(ctx context.Context, c clusterpb.ClusterClient) error {
				r, err := c.DrainNode(ctx, &clusterpb.DrainNodeRequest{Node: args[0], Force: force})
				for _, d := range status.Convert(err).Details() {
					if p, ok := d.(*clusterpb.DrainNodeResponse); ok {
						r = p // a drain that stopped: what it did
					}
				}
				if r != nil {
					for _, m := range r.Moves {
						fmt.Fprintln(cmd.OutOrStdout(), m)
					}
					for _, m := range r.Left {
						fmt.Fprintln(cmd.OutOrStdout(), "left: "+m)
					}
				}
				if err != nil {
					return fmt.Errorf("drain %s: %w", args[0], err)
				}
				return nil
			})
		},
	}
	drain.Flags().BoolVar(&force, "force", false, "for a node that is down: give its tablets to live nodes without its data")
	cf.register(cmd)
	cmd.AddCommand(drain)
	return cmd
}

func newTabletsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "tablets", Short: "List, split, merge and move a table's tablets (cluster mode)", Args: cobra.NoArgs}
	var cf connFlags
	list := &cobra.Command{
		Use:   "list TABLE",
		Short: "List a table's tablets: id, key range and owner",
		Args:  exactArgs(1, "a table name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return cf.withCluster(cmd, func(ctx context.Context, c clusterpb.ClusterClient) error {
				r, err := c.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: cf.tableName(args[0])})
				if err != nil {
					return fmt.Errorf("tablets of %s: %w", args[0], err)
				}
				return printTablets(cmd, r)
			})
		},
	}
	split := &cobra.Command{
		Use:     "split TABLE KEY",
		Short:   "Split the tablet holding KEY at KEY (no data moves)",
		Example: `  ebbtable tablets split users user5000`,
		Args:    exactArgs(2, "a table name and a row key"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return cf.withCluster(cmd, func(ctx context.Context, c clusterpb.ClusterClient) error {
				r, err := c.SplitTablet(ctx, &clusterpb.SplitTabletRequest{Table: cf.tableName(args[0]), Key: []byte(args[1])})
				if err != nil {
					return fmt.Errorf("split %s at %q: %w", args[0], args[1], err)
				}
				return printTablets(cmd, r)
			})
		},
	}
	merge := &cobra.Command{
		Use:     "merge TABLE TABLET",
		Short:   "Merge a tablet with the next one (same owner; no data moves)",
		Example: `  ebbtable tablets merge users 3`,
		Args:    exactArgs(2, "a table name and a tablet id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[1], 10, 64)
			if err != nil || id == 0 {
				return usagef("tablet %q: want a tablet id (see tablets list)", args[1])
			}
			return cf.withCluster(cmd, func(ctx context.Context, c clusterpb.ClusterClient) error {
				r, err := c.MergeTablet(ctx, &clusterpb.MergeTabletRequest{Table: cf.tableName(args[0]), Tablet: id})
				if err != nil {
					return fmt.Errorf("merge tablet %d of %s: %w", id, args[0], err)
				}
				return printTablets(cmd, r)
			})
		},
	}
	var to string
	move := &cobra.Command{
		Use:   "move TABLE TABLET --to NODE",
		Short: "Move a tablet to another node (a planned move)",
		Long: `Move a tablet to another live node. Its owner fences the tablet (requests
wait), exports its span (shared SSTables by reference, the local upper levels
as keys), the target ingests it, one etcd transaction makes the target the
owner, and the old owner drops the span.`,
		Example: `  ebbtable tablets move users 3 --to n2`,
		Args:    exactArgs(2, "a table name and a tablet id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[1], 10, 64)
			if err != nil || id == 0 {
				return usagef("tablet %q: want a tablet id (see tablets list)", args[1])
			}
			if to == "" {
				return usagef("--to NODE is required")
			}
			return cf.withCluster(cmd, func(ctx context.Context, c clusterpb.ClusterClient) error {
				r, err := c.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: cf.tableName(args[0]), Tablet: id, To: to})
				if err != nil {
					return fmt.Errorf("move tablet %d of %s: %w", id, args[0], err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "moved tablet %d from %s to %s: %d bytes shipped (%d local keys, %d local bytes, %d shared SSTables by reference) in %dms\n",
					id, r.From, r.To, r.Bytes, r.LocalKeys, r.LocalBytes, r.SharedSsts, r.Millis)
				return nil
			})
		},
	}
	move.Flags().StringVar(&to, "to", "", "the node to move the tablet to")
	cf.register(cmd)
	cmd.AddCommand(list, split, merge, move)
	return cmd
}

func printTablets(cmd *cobra.Command, r *clusterpb.ListTabletsResponse) error {
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TABLET\tSTART\tEND\tOWNER")
	for _, t := range r.Tablets {
		owner := t.Owner
		if !t.Live {
			owner += " (down)"
		}
		fmt.Fprintf(w, "%d\t%q\t%q\t%s\n", t.Id, t.Start, t.End, owner)
	}
	return w.Flush()
}
