// Package robustness holds ebbtable's fault campaign: tests that run the
// real `ebbtable serve` binary as a subprocess, drive it with the official
// Go client, hurt the process while it works and check what the clients saw.
//
// The package has no code of its own; its tests are the product. Beside
// the campaign below it holds the crash and fault tests of single
// features: SIGKILL while a backup, a restore or a change-stream writer
// works (killnine_test.go), three replicated processes with one killed
// mid-stream (threeclusters_test.go), a scale-out cluster with a node
// killed (scaleout_test.go), full, failing and stalled disks on a
// loop-mounted filesystem (diskfault_test.go, as root), and the server's
// memory and latency under oversized load (bounds_test.go).
//
// TestLinearizability (lin_test.go) follows the pattern of etcd's robustness
// tests. Six or more workers, each with its own connection, run a random mix
// of SetCell of unique values, ReadRow, CheckAndMutateRow used as a
// compare-and-set, and ReadModifyWriteRow increment and append on ten hot
// rows, while a nemesis kills the server with SIGKILL and restarts it on the
// same data directory, or pauses it with SIGSTOP and resumes it with SIGCONT.
// Every operation is recorded with its call and return time. A write that
// failed or timed out may or may not have taken effect, even after its
// client gave up, so it is recorded as returning at the next kill (the end
// of the process that could apply it) or at infinity if no kill follows; a
// failed read tells nothing and is dropped. After
// the last fault every row is read once more, and that read must succeed.
// The history is then checked with porcupine
// (github.com/anishathalye/porcupine) against a sequential model of one row
// (the register column, the counter, the append log), partitioned by row.
// A run in which too few operations succeeded is invalid and fails.
//
// The default `go test` runs one short history (about four seconds of load,
// two kills and one pause). Flags select longer campaigns, for example
//
//	go test ./robustness -run 'TestLinearizability$' -timeout 3h -lin.histories=100 -lin.duration=60s
//
// and -lin.faults=stop (or kill, or none) narrows the nemesis to one kind of
// fault, which tells a crash-recovery bug from a concurrency bug. A failure
// prints the seed, a replay command, the path of porcupine's HTML
// visualization of the history and, per illegal row, a text file that
// starts with where the checker got stuck. A seed replays the same workload
// and faults, not the same timing.
package robustness
