package server

import (
	"context"
	"strings"

	"google.golang.org/grpc/metadata"
)

// ebbHeaderPrefix begins every header of ebbtable's own (MetaRoutedBy,
// MetaCellTTL, MetaShowExpiry, the cluster's and the peers' headers).
const ebbHeaderPrefix = "x-ebbtable-"

// plainCallKey marks a call's context when the headers it arrived with
// hold none of ebbtable's own (value true), or when code replaced the
// headers since (withIncoming; value false, so the mark no longer holds).
type plainCallKey struct{}

// markPlainCall is what the tap does with a call's headers as received:
// ctx marked when none is one of ebbtable's. Looking up a header a call
// lacks walks all of its headers (metadata.ValueFromIncomingContext
// compares every key without case); ReadRows looked up two and MutateRows
// three, where a plain call now walks them once.
func markPlainCall(ctx context.Context, md metadata.MD) context.Context {
	for k := range md {
		if len(k) >= len(ebbHeaderPrefix) && strings.EqualFold(k[:len(ebbHeaderPrefix)], ebbHeaderPrefix) {
			return ctx
		}
	}
	return context.WithValue(ctx, plainCallKey{}, true)
}

// ebbHeader returns the values of one of ebbtable's own headers (key
// begins with ebbHeaderPrefix) in ctx's incoming metadata: none, at once,
// for a call markPlainCall marked.
func ebbHeader(ctx context.Context, key string) []string {
	if plain, _ := ctx.Value(plainCallKey{}).(bool); plain {
		return nil
	}
	return metadata.ValueFromIncomingContext(ctx, key)
}

// withIncoming is metadata.NewIncomingContext for code that replaces a
// call's headers: ebbHeader then reads the new ones.
func withIncoming(ctx context.Context, md metadata.MD) context.Context {
	return context.WithValue(metadata.NewIncomingContext(ctx, md), plainCallKey{}, false)
}
