package robustness

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// motoServer starts a moto_server process (Python moto's S3-compatible
// server) on a loopback port and creates bucket in it; it returns the
// endpoint. Without moto_server on the PATH the test skips, unless
// EBBTABLE_REQUIRE_MOTO is set (.ci/run sets it): then it fails.
func motoServer(t *testing.T, bucket string) string {
	t.Helper()
	bin, err := exec.LookPath("moto_server")
	if err != nil {
		if os.Getenv("EBBTABLE_REQUIRE_MOTO") != "" {
			t.Fatalf("moto_server is not on the PATH and EBBTABLE_REQUIRE_MOTO is set: install it (pip install 'moto[server]==5.2.1')")
		}
		t.Skip("moto_server is not on the PATH (pip install 'moto[server]==5.2.1'): the S3 end-to-end test needs a real S3-compatible server process")
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	lis.Close()
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", fmt.Sprint(port))
	cmd.Env = cleanEnv()
	out := &tailBuffer{max: 8 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group: moto_server may be a shim that starts Python.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", port)
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodPut, endpoint+"/"+bucket, nil)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				break
			}
			t.Fatalf("moto_server: creating bucket %s: %s", bucket, resp.Status)
		}
		select {
		case <-exited:
			t.Fatalf("moto_server exited: %s", out)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("moto_server not answering on %s: %v; output:\n%s", endpoint, err, out)
		}
	}
	return endpoint
}

// s3Env is the environment a serve process on s3:// shared storage gets
// on top of cleanEnv: moto_server's test credentials and region, and no
// endpoint, session or profile of the machine's own (a later value of a
// variable wins over an earlier one).
var s3Env = []string{"AWS_ACCESS_KEY_ID=testing", "AWS_SECRET_ACCESS_KEY=testing", "AWS_REGION=us-east-1",
	"AWS_ENDPOINT_URL=", "AWS_ENDPOINT_URL_S3=", "AWS_SESSION_TOKEN=", "AWS_PROFILE="}

// TestScaleOutKillNineS3: the scale-out end-to-end test (three serve
// processes, tablets splitting and moving, a node killed with SIGKILL and
// restarted, every acknowledged write read back once) with the shared
// SSTables in s3://ebb/cluster on a moto_server process, reached through
// the nodes' S3 client (minio-go) over HTTP with the usual AWS settings.
func TestScaleOutKillNineS3(t *testing.T) {
	t.Parallel() // its own moto_server, etcd, processes and directories; the AWS settings go to its serve processes only (s3Env)
	endpoint := motoServer(t, "ebb")
	start := time.Now()
	scaleOutKillNineOn(t, "s3://ebb/cluster", 1500, "--s3-endpoint", endpoint)
	// Objects landed in the bucket: list it (moto answers unsigned GETs).
	resp, err := http.Get(endpoint + "/ebb?list-type=2&prefix=cluster/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		n += strings.Count(sc.Text(), "<Key>")
	}
	if n == 0 {
		t.Fatalf("no object under s3://ebb/cluster/ after the run (%s)", resp.Status)
	}
	t.Logf("%d objects in s3://ebb/cluster/; %v", n, time.Since(start).Round(time.Millisecond))
}
