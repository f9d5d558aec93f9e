package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestRun runs the example on its fake clock: both approaches keep exactly
// the events the page's example says, at each step; the shifted family has
// lost the click times, the native one has kept them.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	want := `10 customers, 3 click events each, the last at 2026-04-30T09:00:00.000Z.
TTLs: customer 01 1h, customer 02 3d, the others the default 2d.

family shifted: GC rule maxage=2d; timestamps shifted by TTL-2d (01: -47h, 02: +24h)
family native:  no GC rule; x-ebbtable-cell-ttl 1h, 3d or 2d on each write, real timestamps

the last click of customers 01 and 02 as a reader sees it (read with x-ebbtable-show-expiry: true):
  customer01#2  shifted:page @ 2026-04-28T10:00:00.000Z  (not the click time: shifted -47h0m0s)
  customer01#2  native:page  @ 2026-04-30T09:00:00.000Z  expires 2026-04-30T10:00:00.000Z
  customer02#2  shifted:page @ 2026-05-01T09:00:00.000Z  (not the click time: shifted 24h0m0s)
  customer02#2  native:page  @ 2026-04-30T09:00:00.000Z  expires 2026-05-03T09:00:00.000Z

after    clock                     shifted keeps  native keeps  gc pass collected
0s       2026-04-30T09:00:00.000Z  01-10          01-10         0 cells
30m0s    2026-04-30T09:30:00.000Z  01-10          01-10         0 cells
1h0m1s   2026-04-30T10:00:01.000Z  02-10          02-10         6 cells
48h0m1s  2026-05-02T09:00:01.000Z  02             02            48 cells
72h0m1s  2026-05-03T09:00:01.000Z  none           none          6 cells
`
	got := out.String()
	if got == want {
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(gl) || i < len(wl); i++ {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Errorf("line %d:\n got %q\nwant %q", i+1, g, w)
		}
	}
}
