package cli

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestServeConsoleFlags: the web console answers at / on --http-addr,
// read-only unless --console-writes; --console=false leaves /metrics alone.
func TestServeConsoleFlags(t *testing.T) {
	t.Parallel()
	get := func(u string) (int, string) {
		t.Helper()
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	post := func(u string) int {
		t.Helper()
		resp, err := http.PostForm(u, url.Values{})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		flags        []string
		page, action int
		mode         string
	}{
		{nil, 200, 403, "read-only"},
		{[]string{"--console-writes"}, 200, 200, "writes enabled"},
		{[]string{"--console=false"}, 404, 404, ""},
	} {
		httpAddr := freeAddr(t)
		srv := startServe(t, append([]string{"serve", "--addr", "127.0.0.1:0", "--http-addr", httpAddr, "--data", t.TempDir()}, tc.flags...)...)
		ebbtable(t, "createtable", "events", "cf", "--addr", srv.addr).mustSucceed(t, "createtable")
		base := "http://" + httpAddr
		code, body := get(base + "/")
		if code != tc.page || (tc.mode != "" && (!strings.Contains(body, tc.mode) || !strings.Contains(body, "events"))) {
			t.Errorf("%v: GET / = %d:\n%.500s", tc.flags, code, body)
		}
		if code := post(base + "/t/ebbtable/ebbtable/events/gc-run"); code != tc.action {
			t.Errorf("%v: POST gc-run = %d, want %d", tc.flags, code, tc.action)
		}
		if code, _ := get(base + "/metrics"); code != 200 {
			t.Errorf("%v: /metrics = %d", tc.flags, code)
		}
		srv.terminate(t)
	}
}
