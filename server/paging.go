package server

import (
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// page cuts a list of n items, sorted the same way on every call, by a
// List request's page token (an offset this server handed out) and page
// size (0: everything): the items [start, end) to return and the next
// page's token ("" after the last page).
func page(token string, size int32, n int) (start, end int, next string, err error) {
	if token != "" {
		start, err = strconv.Atoi(token)
		if err != nil || start < 0 || start > n {
			return 0, 0, "", status.Errorf(codes.InvalidArgument, "ebbtable: bad page token %q", token)
		}
	}
	end = n
	if ps := int(size); ps > 0 && start+ps < end {
		end = start + ps
	}
	if end < n {
		next = strconv.Itoa(end)
	}
	return start, end, next, nil
}
