package storage

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecodeValue feeds arbitrary stored values (as a peer's snapshot or a
// damaged file may carry them) to the value-header decoders. DecodeValue,
// DecodeStamped and ValueExpiry must agree; a refusal wraps ErrCorruptKey;
// an accepted value's data is its tail, and re-encoding what was decoded
// decodes to the same data, expiry and stamp.
func FuzzDecodeValue(f *testing.F) {
	f.Add(EncodeValue([]byte("v"), 0))
	f.Add(EncodeValue([]byte("v"), 1767225600000000))
	f.Add(EncodeStamped([]byte("value"), 0, Stamp{Commit: 1234, Cluster: "a"}))
	f.Add(EncodeStamped(nil, 99000, Stamp{Commit: 1 << 50, Cluster: "cluster-b"}))
	f.Add([]byte{})
	f.Add([]byte{flagStamp, 0, 0, 0, 0, 0, 0, 0, 0, 255})
	f.Add([]byte{flagExpiry | flagStamp, 1, 2, 3})
	f.Add([]byte{0x80, 0})
	f.Fuzz(func(t *testing.T, v []byte) {
		data, exp, err := DecodeValue(v)
		sdata, sexp, st, serr := DecodeStamped(v)
		if (err == nil) != (serr == nil) {
			t.Fatalf("%x: DecodeValue err %v, DecodeStamped err %v", v, err, serr)
		}
		if err != nil {
			if !errors.Is(err, ErrCorruptKey) || !errors.Is(serr, ErrCorruptKey) {
				t.Fatalf("%x: errors %v / %v do not wrap ErrCorruptKey", v, err, serr)
			}
			return
		}
		if !bytes.Equal(data, sdata) || exp != sexp {
			t.Fatalf("%x: DecodeValue %q %d, DecodeStamped %q %d", v, data, exp, sdata, sexp)
		}
		if len(data) > len(v) || !bytes.Equal(v[len(v)-len(data):], data) {
			t.Fatalf("%x: data %x is not the value's tail", v, data)
		}
		if got := ValueExpiry(v); got != exp {
			t.Fatalf("%x: ValueExpiry %d, DecodeValue %d", v, got, exp)
		}
		again := EncodeStamped(data, exp, st)
		d2, e2, st2, err := DecodeStamped(again)
		if err != nil || !bytes.Equal(d2, data) || e2 != exp || st2 != st {
			t.Fatalf("%x → (%q, %d, %+v) → %x → (%q, %d, %+v, %v)", v, data, exp, st, again, d2, e2, st2, err)
		}
	})
}
