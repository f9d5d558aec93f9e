package merge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/ebbtable/ebbtable/changestream"
)

// script is a source whose partitions answer fixed responses.
type script map[string][]*Response

func (s script) Partitions(context.Context) ([]Range, error) {
	return []Range{{End: []byte("m")}, {Start: []byte("m")}}, nil
}

func (s script) Watch(_ context.Context, p Range, _ Start) (Stream, error) {
	return &scripted{rs: s[string(p.Start)+"-"+string(p.End)]}, nil
}

type scripted struct{ rs []*Response }

func (s *scripted) Recv() (*Response, error) {
	if len(s.rs) == 0 {
		return nil, io.EOF
	}
	r := s.rs[0]
	s.rs = s.rs[1:]
	return r, nil
}

func line(c int64, row string) *Response {
	tok := fmt.Sprintf("v1.%d.0.0", c)
	return &Response{Line: fmt.Sprintf(`{"token":%q,"row_key":%q}`, tok, row), Token: tok, ReadTo: tok}
}

func beat(c int64) *Response {
	tok := fmt.Sprintf("v1.%d.0.0", c)
	return &Response{Token: tok, ReadTo: tok}
}

var end = &Response{Close: &Close{}}

// TestRunMergesInCommitOrder: two partitions' records come out in commit
// order, a record seen twice once, and an emit error stops the merge.
func TestRunMergesInCommitOrder(t *testing.T) {
	src := script{
		"-m": {line(10, "a"), line(30, "c"), line(30, "c"), beat(60), end},
		"m-": {line(20, "n"), line(40, "o"), line(50, "p"), end},
	}
	var got []string
	var last changestream.Position
	err := Run(context.Background(), src, Options{}, func(l string, pos changestream.Position) error {
		if pos.Less(last) {
			t.Errorf("%s before %v", l, last)
		}
		last = pos
		got = append(got, l[strings.Index(l, `"row_key":`)+11:len(l)-2])
		return nil
	})
	if err != nil || strings.Join(got, " ") != "a n c o p" {
		t.Fatalf("got %q, %v", got, err)
	}
	src = script{
		"-m": {line(10, "a"), line(30, "c"), beat(60), end},
		"m-": {line(20, "n"), line(40, "o"), end},
	}
	stop := errors.New("enough")
	n := 0
	err = Run(context.Background(), src, Options{}, func(string, changestream.Position) error {
		if n++; n == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 2 {
		t.Fatalf("stopped after %d with %v", n, err)
	}
}
