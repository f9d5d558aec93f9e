// Package changestream owns the change-stream record model: what one
// recorded change holds, its binary and JSON encodings, the key layout of the
// record space, continuation tokens, and the reader that scans records in
// commit order.
package changestream
