package cli

import (
	"strings"
	"testing"

	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"google.golang.org/protobuf/proto"
)

// TestPrintJSON: --json prints an answer by its proto field names, every
// field but unset optional ones, int64 as JSON numbers, bytes in base64,
// empty lists as [].
func TestPrintJSON(t *testing.T) {
	var b strings.Builder
	resp := &ebbadminpb.ReplicationDiffResponse{Cluster: "a", Table: "t", Peers: []*ebbadminpb.DiffPeer{
		{Peer: "b", Chunks: 3, Cells: []*ebbadminpb.DiffCell{{Row: []byte("r\xff"), Family: "f", Timestamp: 1_700_000_000_000_001, Class: "in flight"}}},
		{Peer: "c", Repaired: proto.Int64(0)},
	}}
	if err := printJSON(&b, resp); err != nil {
		t.Fatal(err)
	}
	want := `{
  "cluster": "a",
  "peers": [
    {
      "cells": [
        {
          "class": "in flight",
          "family": "f",
          "lacking": "",
          "on": "",
          "qualifier": "",
          "row": "cv8=",
          "timestamp": 1700000000000001
        }
      ],
      "chunks": 3,
      "differing_chunks": 0,
      "peer": "b"
    },
    {
      "cells": [],
      "chunks": 0,
      "differing_chunks": 0,
      "peer": "c",
      "repaired": 0
    }
  ],
  "table": "t"
}
`
	if got := b.String(); got != want {
		t.Errorf("printJSON:\n%s\nwant\n%s", got, want)
	}
}
