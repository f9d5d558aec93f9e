package testbin

import (
	"slices"
	"testing"
)

func TestServeArgs(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"serve", "--data", "d"}, []string{"serve", "--ballast-size", TestBallast, "--data", "d"}},
		{[]string{"serve", "--ballast-size", "8MiB"}, []string{"serve", "--ballast-size", "8MiB"}},
		{[]string{"serve", "--ballast-size=0"}, []string{"serve", "--ballast-size=0"}},
		{[]string{"ls"}, []string{"ls"}},
		{nil, nil},
	} {
		if got := ServeArgs(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("ServeArgs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
