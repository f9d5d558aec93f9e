package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/server"
	"github.com/spf13/cobra"
)

// --backup-part-wait and --restore-part-wait reach the cluster options,
// with the 2 min default; zero is refused.
func TestClusterPartWaitFlags(t *testing.T) {
	t.Parallel()
	parse := func(args ...string) (*server.ClusterOptions, error) {
		cmd := &cobra.Command{Use: "serve"}
		var f clusterFlags
		f.register(cmd.Flags())
		if err := cmd.Flags().Parse(append([]string{"--etcd", "127.0.0.1:2379", "--node-id", "n1"}, args...)); err != nil {
			t.Fatal(err)
		}
		return f.options(cmd)
	}
	o, err := parse()
	if err != nil || o.BackupPartWait != 2*time.Minute || o.RestorePartWait != 2*time.Minute {
		t.Fatalf("defaults: %+v, %v", o, err)
	}
	o, err = parse("--backup-part-wait", "5s", "--restore-part-wait", "7m")
	if err != nil || o.BackupPartWait != 5*time.Second || o.RestorePartWait != 7*time.Minute {
		t.Fatalf("set: %+v, %v", o, err)
	}
	if _, err := parse("--restore-part-wait", "0s"); err == nil || !strings.Contains(err.Error(), "--restore-part-wait 0s") {
		t.Fatalf("zero wait: %v", err)
	}
}
