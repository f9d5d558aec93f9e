package objstore

import (
	"net/http"
	"sync/atomic"
)

// countGets counts the GET requests h serves.
func countGets(h http.Handler, n *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "" && r.URL.RawQuery == "" {
			n.Add(1)
		}
		h.ServeHTTP(w, r)
	})
}
