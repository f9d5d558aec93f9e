package cli

import "testing"

// TestClusterServeFlags covers the validation of serve's cluster-mode
// flags and of the tablet commands' arguments: usage errors, nothing
// started.
func TestClusterServeFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"node id alone", []string{"--node-id", "n1"}, "--node-id needs --etcd"},
		{"shared storage alone", []string{"--shared-storage", "file:///tmp/x"}, "--shared-storage needs --etcd"},
		{"etcd without node id", []string{"--etcd", "127.0.0.1:2379"}, "--etcd needs --node-id"},
		{"short lease", []string{"--etcd", "127.0.0.1:2379", "--node-id", "n1", "--lease-ttl", "100ms"}, "--lease-ttl 100ms must be at least 1s"},
		{"failover alone", []string{"--failover"}, "--failover needs --etcd"},
		{"failover without shared storage", []string{"--etcd", "127.0.0.1:2379", "--node-id", "n1", "--failover"}, "--failover needs --shared-storage"},
		{"bad split size", []string{"--etcd", "127.0.0.1:2379", "--node-id", "n1", "--split-size", "lots"}, "--split-size \"lots\""},
		{"release at once", []string{"--etcd", "127.0.0.1:2379", "--node-id", "n1", "--release-dead-after", "0s"}, "--release-dead-after 0"},
	} {
		r := ebbtable(t, append([]string{"serve", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", dir}, tc.args...)...)
		wantFailure(t, tc.name, r, 2, tc.msg, "--help")
	}
	r := ebbtable(t, "tablets", "move", "t", "x", "--to", "n2", "--addr", "127.0.0.1:1")
	wantFailure(t, "tablet id", r, 2, `tablet "x": want a tablet id`, "--help")
	r = ebbtable(t, "tablets", "move", "t", "3", "--addr", "127.0.0.1:1")
	wantFailure(t, "no --to", r, 2, "--to NODE is required", "--help")
}
