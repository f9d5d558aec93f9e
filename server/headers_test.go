package server

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/grpc/metadata"
)

// TestEbbHeader: a call marked plain reads none of ebbtable's headers; an
// unmarked one, one whose headers hold one of ebbtable's (in any case),
// and one whose headers were replaced since the mark, read them from the
// metadata.
func TestEbbHeader(t *testing.T) {
	base := metadata.MD{"user-agent": {"x"}, "x-goog-request-params": {"table_name=t"}, "x-ebbtable": {"not ours"}}
	in := func(md metadata.MD) context.Context { return metadata.NewIncomingContext(context.Background(), md) }

	ctx := markPlainCall(in(base), base)
	if v, _ := ctx.Value(plainCallKey{}).(bool); !v {
		t.Fatal("a call without ebbtable's headers is not marked plain")
	}
	if v := ebbHeader(ctx, MetaShowExpiry); v != nil {
		t.Fatalf("plain call: %s = %q", MetaShowExpiry, v)
	}

	for _, key := range []string{MetaShowExpiry, "X-Ebbtable-Show-Expiry"} {
		md := base.Copy()
		md[key] = []string{"true"}
		ctx := markPlainCall(in(md), md)
		if ctx.Value(plainCallKey{}) != nil {
			t.Fatalf("a call with %s is marked plain", key)
		}
		if v := ebbHeader(ctx, MetaShowExpiry); !slices.Equal(v, []string{"true"}) {
			t.Fatalf("%s: %s = %q, want [true]", key, MetaShowExpiry, v)
		}
	}

	if v := ebbHeader(in(metadata.Pairs(MetaRoutedBy, "c1")), MetaRoutedBy); !slices.Equal(v, []string{"c1"}) {
		t.Fatalf("unmarked call: %s = %q, want [c1]", MetaRoutedBy, v)
	}

	// A query's reads replace the headers of a plain call (clustersql.go).
	md := base.Copy()
	md.Set(MetaRoutedBy, "c2")
	if v := ebbHeader(withIncoming(ctx, md), MetaRoutedBy); !slices.Equal(v, []string{"c2"}) {
		t.Fatalf("replaced headers: %s = %q, want [c2]", MetaRoutedBy, v)
	}
}
